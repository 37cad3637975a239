// The body of one training step, shared by train_main (framework/run/trainer.cpp) and the tests:
//   forward + fused loss + backward -> gradient all-reduce over dp x cp -> shared-KV reduction over tp
//   -> clip + AdamW.
// On CUDA the host does not wait for the GPU inside train_step (with NCCL or a single rank: a communicator
// that stages GPU tensors through the host, MpiComm, waits there). The step's per-token losses stay in
// model.losses() and its gradient norm on the device; step_losses() and AdamW::last_grad_norm() fetch them
// where the step is logged.
#pragma once
#include <cmath>
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
  // NaN when there was no target: a loss over nothing is not 0 (the metrics write it as null).
  double mean(int k) const { return count[size_t(k)] > 0 ? sum[size_t(k)] / count[size_t(k)] : NAN; }
  bool no_targets() const { return count[0] == 0; }
  // (name, mean loss) of each group with a target; empty when the source reports none.
  std::vector<std::pair<std::string, double>> group_means() const;
};

// One optimizer step at the 1-based `step` with learning rate `lr` on this rank's `batch`. Collective over
// the model's communicators. Returns the global batch's target count (0: nothing to learn from; no gradient).
double train_step(Model& model, AdamW& optimizer, const Batch& batch, int64_t step, float lr);

// The losses of the latest train_step (whose batch was `batch`), summed over dp x cp: collective over
// model.dp_cp_comm(). Downloads model.losses(): on CUDA the host waits for the GPU here.
LossTally step_losses(Model& model, const Batch& batch);

// What one eval reads: consecutive, non-overlapping windows of data.seq_len tokens from the start of the held-out
// split, the same every time. A window's T tokens give T-1 next-token targets (its last token has no next token
// inside the window; with documents, fewer: the boundary targets are left out). train.eval_batches = 0: every
// whole window of the split; N: the first N x train.batch_size windows (at most the split's). The last batch is
// padded with windows that have no targets. A generated split (the copy task) has no end: N batches of its
// held-out samples (kGeneratedEvalBatches, framework/config/config.h, when 0).
struct EvalPlan {
  uint64_t windows = 0;        // windows evaluated
  uint64_t batches = 0;        // global batches (the last one padded)
  int64_t seq_len = 0;
  uint64_t split_tokens = 0;   // tokens (bytes) in the held-out split; 0: generated (copy task)
  uint64_t split_windows = 0;  // whole windows in it
  // "12 windows x 64 tokens = 768 tokens, 97.2% of the held-out split (790 tokens), in order"
  std::string text() const;
};
// Sets the loader's sample limit (padding past the last window). Throws for eval_batches < 0.
EvalPlan plan_eval(const Config& config, DataLoader& eval_loader);
// The summed held-out losses of the plan's windows. Collective.
LossTally evaluate(Model& model, DataLoader& eval_loader, const EvalPlan& plan);
// " (first_half 3.4012, repeat_half 0.0100)": the data source's loss groups, or "" when it has none.
std::string halves_text(const LossTally& t);
// "3.2145", or "n/a (no targets)" when the tally has none (a mean over nothing is not 0).
std::string loss_text(const LossTally& t);
// Why a batch can have no target, for the warning of a step or eval without one: the document boundaries with
// data.documents: eot (naming data.eot_token), else the data source.
std::string no_targets_reason(const Config& config);
// " | targets 1016 (8 dropped at document boundaries)": the targets in the loss and the boundary targets
// (data.documents: eot) left out of it.
std::string targets_text(const LossTally& t);

}  // namespace rt
