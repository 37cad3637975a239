#include "framework/train_step.h"

#include <cstdio>

#include "framework/data.h"
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
  optimizer.guard_losses(model.losses());  // a non-finite loss poisons the norm: the step is skipped
  Comm& dp_cp = model.dp_cp_comm();
  if (dp_cp.size() > 1) dp_cp.all_reduce_sum(model.grads());
  model.reduce_shared_kv_grads();
  optimizer.step(step, lr);
}

LossTally evaluate(Model& model, DataLoader& eval_loader, int batches) {
  eval_loader.set_cursor(0);
  LossTally tally;
  for (int b = 0; b < batches; ++b) {
    const Batch batch = eval_loader.next();
    const double count = model.global_target_count(batch);
    tally.add(batch, model.step(batch, count, /*want_grad=*/false));
  }
  tally.all_reduce(model.dp_cp_comm());
  return tally;
}

std::string halves_text(const LossTally& t) {
  if (!t.has_halves()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, " (first half %.4f, repeat half %.4f)", t.mean(1), t.mean(2));
  return buf;
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
