// The body of one training step, shared by train_main (framework/trainer.cpp) and the tests:
//   forward + fused loss + backward -> gradient all-reduce over dp x cp -> shared-KV reduction over tp
//   -> clip + AdamW.
// On CUDA the host does not wait for the GPU inside train_step (with NCCL or a single rank: a communicator
// that stages GPU tensors through the host, MpiComm, waits there). The step's per-token losses stay in
// model.losses() and its gradient norm on the device; step_losses() and AdamW::last_grad_norm() fetch them
// where the step is logged.
#pragma once
#include <string>
#include <vector>

#include "framework/data.h"
#include "framework/model.h"
#include "framework/optimizer.h"

namespace rt {

// Losses of one batch (or several), summed; the copy task's two halves separately.
struct LossTally {
  double sum[3] = {0, 0, 0}, count[3] = {0, 0, 0};  // [0] all targets, [1] first half, [2] repeat half
  void add(const Batch& batch, const std::vector<float>& losses);
  void all_reduce(Comm& comm);  // collective
  double mean(int k) const { return count[k] > 0 ? sum[k] / count[k] : 0; }
  bool has_halves() const { return count[1] > 0 || count[2] > 0; }
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
// " (first half 3.4012, repeat half 0.0100)" for the copy task, else "".
std::string halves_text(const LossTally& t);

}  // namespace rt
