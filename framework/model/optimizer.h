// AdamW over the model's flat parameter buffer (fp32 masters and moments), global grad-norm clipping,
// and the learning-rate schedule (linear warmup, then cosine to min_lr).
#pragma once
#include <vector>

#include "framework/base/host_tensor.h"
#include "framework/config/config.h"
#include "framework/model/model.h"
#include "kernels/arena.h"

namespace rt {

// lr at a 1-based step: step * lr / warmup while step <= warmup, then cosine from lr to min_lr at
// total_steps (min_lr after that).
float learning_rate(const OptimConfig& optim, int64_t step, int64_t total_steps);


class AdamW {
 public:
  // m and v (P) f32 come from `arena`, laid out like model.master().
  AdamW(const OptimConfig& config, Model& model, Arena& arena);

  void zero_state();
  // One AdamW update at the 1-based `step` with learning rate `lr`, the gradients clipped to optim.grad_clip
  // by the global norm (when > 0). Collective over tp. On CUDA the host does not wait: the norm and the clip
  // factor stay on the device, and the update reads the factor there (grads() themselves are not changed).
  // With NCCL (or tp = 1) the norm's all-reduce over tp is on the stream too; a tp communicator that stages
  // GPU tensors through the host (MpiComm) waits for the GPU there.
  void step(int64_t step, float lr);
  // The global gradient norm (before clipping) of the latest step(): downloads one float, so on CUDA the host
  // waits for that step's optimizer work. Call it where the step is logged.
  double last_grad_norm() const;
  // The divergence guard, on the device: 0 * sum(losses^2) (0 when every loss is finite, NaN otherwise) is
  // added to the first gradient element, so a non-finite loss makes the global norm non-finite on every rank
  // once the gradients are all-reduced. Call between forward_backward and the gradient all-reduce.
  void guard_losses(const Tensor& losses);
  // Steps skipped since zero_state() because the norm was not finite (their update was not applied). Downloads
  // one float: a host wait on CUDA; call it where the step is logged or before a save.
  int64_t skipped_steps() const;

  // Moments as full tensors ("exp_avg.<param>", "exp_avg_sq.<param>"), collective over tp; and back.
  std::vector<HostTensor> export_state();
  void import_state(const std::vector<HostTensor>& tensors);

  Tensor m() const { return m_; }
  Tensor v() const { return v_; }

 private:
  OptimConfig config_;
  Model& model_;
  Tensor m_, v_;  // (P) f32
  // (4) f32: [0] global sum of squared gradients, [1] clip factor (1 when not clipping; NaN: skip the step),
  // [2] skipped-step count, [3] the loss check's scratch
  Tensor clip_;
};

}  // namespace rt
