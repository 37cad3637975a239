#include "framework/run/train_step.h"

#include <algorithm>
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

double train_step(Model& model, AdamW& optimizer, const Batch& batch, int64_t step, float lr) {
  const double count = model.global_target_count(batch);  // host scalars over MPI: no GPU wait
  model.forward_backward(batch, count, /*want_grad=*/true);
  optimizer.guard_losses(model.losses());  // a non-finite loss poisons the norm: the step is skipped
  model.reduce_gradients();  // over dp x cp: all-reduce (zero 0) or reduce-scatter into the shards (zero >= 1)
  model.reduce_shared_kv_grads();
  optimizer.step(step, lr);
  return count;
}

std::string EvalPlan::text() const {
  char buf[256];
  if (split_tokens == 0) {
    std::snprintf(buf, sizeof buf, "%llu generated held-out samples x %lld tokens (%llu batches)",
                  (unsigned long long)windows, (long long)seq_len, (unsigned long long)batches);
  } else {
    const double tokens = double(windows) * double(seq_len);
    std::snprintf(buf, sizeof buf, "%llu windows x %lld tokens = %.0f tokens, %.1f%% of the held-out split (%llu "
                  "tokens), in order", (unsigned long long)windows, (long long)seq_len, tokens,
                  100.0 * tokens / double(split_tokens), (unsigned long long)split_tokens);
  }
  return buf;
}

EvalPlan plan_eval(const Config& config, DataLoader& eval_loader) {
  const int n = config.train.eval_batches;
  RT_CHECK(n >= 0, "train.eval_batches=" << n << " must be >= 0 (0 = the whole held-out split)");
  const uint64_t B = uint64_t(config.train.batch_size);
  EvalPlan plan;
  plan.seq_len = config.data.seq_len;
  plan.split_tokens = eval_loader.split_tokens();
  if (plan.split_tokens == 0) {
    plan.batches = uint64_t(n > 0 ? n : kGeneratedEvalBatches);
    plan.windows = plan.batches * B;
  } else {
    plan.split_windows = plan.split_tokens / uint64_t(plan.seq_len);
    plan.windows = n > 0 ? std::min(uint64_t(n) * B, plan.split_windows) : plan.split_windows;
    plan.batches = (plan.windows + B - 1) / B;
  }
  eval_loader.set_sample_limit(plan.windows);
  return plan;
}

LossTally evaluate(Model& model, DataLoader& eval_loader, const EvalPlan& plan) {
  eval_loader.set_cursor(0);
  LossTally tally;
  for (uint64_t b = 0; b < plan.batches; ++b) {
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

std::string loss_text(const LossTally& t) {
  if (t.no_targets()) return "n/a (no targets)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", t.mean(0));
  return buf;
}

std::string no_targets_reason(const Config& config) {
  if (config.data.documents == "eot")
    return "with data.documents: eot every target that crosses into the next document (the one predicting its "
           "first token, data.eot_token=" + std::to_string(resolved_eot_token(config)) + ") is left out, so documents "
           "of one token have none; check data.eot_token and the documents' lengths (or use data.documents: none)";
  return "data.source=" + config.data.source + " gave no next-token target in these windows";
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
