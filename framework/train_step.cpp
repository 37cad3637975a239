#include "framework/train_step.h"

#include "kernels/ops.h"

namespace rt {

void LossTally::add(const Batch& batch, const std::vector<float>& losses) {
  if (names.empty() && !batch.group_names.empty()) {
    names = batch.group_names;
    sum.resize(names.size() + 1, 0.0);
    count.resize(names.size() + 1, 0.0);
  }
  for (size_t i = 0; i < losses.size(); ++i) {
    if (batch.targets[i] < 0) continue;
    sum[0] += losses[i], count[0] += 1;
    const size_t g = i < batch.groups.size() ? batch.groups[i] : 0;
    if (g > 0 && g < sum.size()) sum[g] += losses[i], count[g] += 1;
  }
}

void LossTally::all_reduce(Comm& comm) {
  const size_t n = sum.size();
  std::vector<double> v(sum);
  v.insert(v.end(), count.begin(), count.end());
  comm.all_reduce_sum(v.data(), int(v.size()));
  for (size_t i = 0; i < n; ++i) sum[i] = v[i], count[i] = v[n + i];
}

std::vector<std::pair<std::string, double>> LossTally::group_means() const {
  std::vector<std::pair<std::string, double>> out;
  for (size_t g = 1; g < sum.size() && g <= names.size(); ++g)
    if (count[g] > 0) out.emplace_back(names[g - 1], sum[g] / count[g]);
  return out;
}

void train_step(Model& model, AdamW& optimizer, const Batch& batch, int64_t step, float lr) {
  const double count = model.global_target_count(batch);  // host scalars over MPI: no GPU wait
  model.forward_backward(batch, count, /*want_grad=*/true);
  Comm& dp_cp = model.dp_cp_comm();
  if (dp_cp.size() > 1) dp_cp.all_reduce_sum(model.grads());
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
