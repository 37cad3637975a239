#include "framework/run/train_step.h"

#include <cstdio>

#include "framework/data/data.h"
#include "kernels/ops.h"

namespace rt {

void LossTally::add(const Batch& batch, const std::vector<float>& losses) {
  if (names.empty() && !batch.group_names.empty()) {
    names = batch.group_names;
    sum.resize(names.size() + 1, 0.0);
    count.resize(names.size() + 1, 0.0);
  }
  boundary_dropped += double(batch.boundary_targets);
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
  v.push_back(boundary_dropped);
  comm.all_reduce_sum(v.data(), int(v.size()));
  for (size_t i = 0; i < n; ++i) sum[i] = v[i], count[i] = v[n + i];
  boundary_dropped = v[2 * n];
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
  optimizer.guard_losses(model.losses());  // a non-finite loss poisons the norm: the step is skipped
  model.reduce_gradients();  // over dp x cp: all-reduce (zero 0) or reduce-scatter into the shards (zero >= 1)
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

std::string halves_text(const LossTally& t) {  // the data source's loss groups, e.g. the copy task's halves
  std::string text;
  for (const auto& [name, mean] : t.group_means()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.4f", text.empty() ? " (" : ", ", name.c_str(), mean);
    text += buf;
  }
  return text.empty() ? text : text + ")";
}

std::string targets_text(const LossTally& t) {
  char buf[128];
  std::snprintf(buf, sizeof buf, " | targets %.0f (%.0f dropped at document boundaries)", t.count[0],
                t.boundary_dropped);
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
