// The body of one training step, shared by train_main (framework/run/trainer.cpp) and the tests:
//   forward + fused loss + backward -> gradient all-reduce over dp x cp -> shared-KV reduction over tp
//   -> clip + AdamW.
// On CUDA the host does not wait for the GPU inside train_step (with NCCL or a single rank: a communicator
// that stages GPU tensors through the host, MpiComm, waits there). The step's per-token losses stay in
// model.losses() and its gradient norm on the device; step_losses() and AdamW::last_grad_norm() fetch them
// where the step is logged.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/model/optimizer.h"

namespace rt {

// Losses of one batch (or several), summed, overall and per loss group of the data source (Batch::groups).
struct LossTally {
  std::vector<std::string> names;        // the groups (from the first batch added)
  std::vector<double> sum{0}, count{0};  // [0] all targets, [g] group g
  // data.documents: eot: targets dropped because they cross into the next document (Batch::boundary_targets);
  // count[0] excludes them (they are not in the loss).
  double boundary_dropped = 0;
  void add(const Batch& batch, const std::vector<float>& losses);
  void all_reduce(Comm& comm);  // collective; every rank's source reports the same groups
  double mean(int k) const { return count[size_t(k)] > 0 ? sum[size_t(k)] / count[size_t(k)] : 0; }
  // (name, mean loss) of each group with a target; empty when the source reports none.
  std::vector<std::pair<std::string, double>> group_means() const;
};

// One optimizer step at the 1-based `step` with learning rate `lr` on this rank's `batch`. Collective over
// the model's communicators.
void train_step(Model& model, AdamW& optimizer, const Batch& batch, int64_t step, float lr);

// The losses of the latest train_step (whose batch was `batch`), summed over dp x cp: collective over
// model.dp_cp_comm(). Downloads model.losses(): on CUDA the host waits for the GPU here.
LossTally step_losses(Model& model, const Batch& batch);

class DataLoader;
// Mean per-token loss over the first `batches` held-out batches (the same batches every time). Collective.
LossTally evaluate(Model& model, DataLoader& eval_loader, int batches);
// " (first_half 3.4012, repeat_half 0.0100)": the data source's loss groups, or "" when it has none.
std::string halves_text(const LossTally& t);
// " | targets 1016 (8 dropped at document boundaries)": the targets in the loss and the boundary targets
// (data.documents: eot) left out of it.
std::string targets_text(const LossTally& t);

}  // namespace rt
