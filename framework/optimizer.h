// AdamW over the model's flat parameter buffer (fp32 masters and moments), global grad-norm clipping,
// and the learning-rate schedule (linear warmup, then cosine to min_lr).
#pragma once
#include <vector>

#include "framework/checkpoint.h"
#include "framework/config.h"
#include "framework/model.h"
#include "kernels/arena.h"

namespace rt {

// lr at a 1-based step: step * lr / warmup while step <= warmup, then cosine from lr to min_lr at
// total_steps (min_lr after that).
float learning_rate(const OptimConfig& optim, int64_t step, int64_t total_steps);

// sqrt of the sum of squared gradients of the whole (unsharded) model: sharded shards are summed over tp,
// replicated tensors counted once. Collective over tp.
double global_grad_norm(Model& model);

class AdamW {
 public:
  // m and v (P) f32 come from `arena`, laid out like model.master().
  AdamW(const OptimConfig& config, Model& model, Arena& arena);

  void zero_state();
  // Clips the gradients to optim.grad_clip by the global norm (when > 0) and applies one AdamW update at
  // the 1-based `step` with learning rate `lr`. Returns the norm before clipping.
  double step(int64_t step, float lr);

  // Moments as full tensors ("exp_avg.<param>", "exp_avg_sq.<param>"), collective over tp; and back.
  std::vector<HostTensor> export_state();
  void import_state(const std::vector<HostTensor>& tensors);

  Tensor m() const { return m_; }
  Tensor v() const { return v_; }

 private:
  OptimConfig config_;
  Model& model_;
  Tensor m_, v_;  // (P) f32
};

}  // namespace rt
