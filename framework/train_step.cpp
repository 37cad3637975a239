#include "framework/train_step.h"

#include "kernels/ops.h"

namespace rt {

void LossTally::add(const Batch& batch, const std::vector<float>& losses) {
  for (size_t i = 0; i < losses.size(); ++i) {
    if (batch.targets[i] < 0) continue;
    sum[0] += losses[i], count[0] += 1;
    if (i < batch.kinds.size() && batch.kinds[i] != TargetKind::other) {
      const int k = batch.kinds[i] == TargetKind::first_half ? 1 : 2;
      sum[k] += losses[i], count[k] += 1;
    }
  }
}

void LossTally::all_reduce(Comm& comm) {
  double v[6] = {sum[0], sum[1], sum[2], count[0], count[1], count[2]};
  comm.all_reduce_sum(v, 6);
  for (int i = 0; i < 3; ++i) sum[i] = v[i], count[i] = v[3 + i];
}

void train_step(Model& model, AdamW& optimizer, const Batch& batch, int64_t step, float lr) {
  const double count = model.global_target_count(batch);  // host scalars over MPI: no GPU wait
  model.forward_backward(batch, count, /*want_grad=*/true);
  model.reduce_gradients();  // over dp x cp: all-reduce (zero 0) or reduce-scatter into the shards (zero >= 1)
  model.reduce_shared_kv_grads();
  optimizer.step(step, lr);
}

LossTally step_losses(Model& model, const Batch& batch) {
  const Tensor device_losses = model.losses();  // (B*n) f32
  std::vector<float> losses(size_t(device_losses.numel()));
  copy_cast(Tensor(losses.data(), DType::f32, Device::cpu(), {device_losses.numel()}), device_losses);
  LossTally tally;
  tally.add(batch, losses);
  tally.all_reduce(model.dp_cp_comm());
  return tally;
}

}  // namespace rt
