// Shared by the GPU model tests (tests/gpu/test_gpu_model.cpp, tests/mpi/test_gpu_model_grid.cpp): a small
// config whose head_dim (64) the CUDA attention supports, and one training step's loss and full gradients on
// any device and grid.
#pragma once
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/model/optimizer.h"
#include "framework/plan/trainer_setup.h"

namespace rt::test {

// 2 layers, d 128, 2 heads of 64 (GQA variant: 1 KV head), vocab 64, copy task of 128 tokens (divisible by
// 2*cp for cp <= 8), global batch 2.
// overrides: --set style assignments applied last (e.g. model.rope_scaling.* for the scaled-RoPE cases).
inline Config gpu_model_config(int dp, int cp, int tp, const std::string& mlp = "gelu", int n_kv_head = 2,
                               const std::string& checkpointing = "none",
                               const std::vector<std::string>& overrides = {}) {
  std::ostringstream y;
  y << "model:\n  n_layer: 2\n  d_model: 128\n  n_head: 2\n  n_kv_head: " << n_kv_head << "\n  vocab_size: 64\n"
    << "  mlp: " << mlp << "\n  d_ff: 256\n  tied_embeddings: false\n"
    << "data:\n  source: copy\n  seq_len: 128\n  seed: 5\n"
    << "parallel:\n  dp: " << dp << "\n  cp: " << cp << "\n  tp: " << tp << "\n  layout: auto\n  comm: mpi\n"
    << "train:\n  batch_size: 2\n  steps: 10\n  eval_every: 0\n  lm_head_chunk: 96\n  seed: 3\n"
    << "  checkpointing: " << checkpointing << "\n"
    << "optim:\n  lr: 0.003\n  min_lr: 0.0003\n  warmup_steps: 2\n  grad_clip: 1.0\n"
    << "device: auto\n";
  return parse_config_text(y.str(), overrides, /*world_size=*/0, "gpu_model_config");
}

struct StepResult {
  double loss = 0;               // global mean loss of the first step
  std::vector<HostTensor> grads;  // full gradients (after the dp x cp and shared-KV sums)
};

// One forward + backward of the first batch on `device` over `grid`, weights from train.seed.
inline StepResult first_step(const Config& config, ProcessGrid& grid, Device device) {
  ModelSession session = build_session(config, ModelComms::from(grid), device, /*with_optimizer=*/true);
  // A training session: a forward-only one (eval, generate) keeps no activations and refuses the backward.
  Model& model = *session.model;
  model.init_weights(config.train.seed);
  model.sync_compute_weights();
  std::unique_ptr<DataLoader> loader = make_loader(config, loader_rank(config, grid), "train");
  const Batch batch = loader->next();
  const double count = model.global_target_count(batch);
  const std::vector<float> losses = model.step(batch, count, /*want_grad=*/true);
  double sum = 0;
  for (size_t i = 0; i < losses.size(); ++i)
    if (batch.targets[i] >= 0) sum += losses[i];
  grid.dp_cp().all_reduce_sum(&sum, 1);
  model.reduce_gradients();  // all-reduce (zero 0) or reduce-scatter into the shards (zero >= 1)
  model.reduce_shared_kv_grads();
  StepResult r;
  r.loss = sum / count;
  r.grads = model.gather_full(model.grads(), "");
  return r;
}

// ||a - ref|| / ||ref|| over float vectors (infinity on a NaN or a size mismatch).
inline double rel_norm_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    const double d = double(a[i]) - ref[i];
    num += d * d, den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Per-tensor and whole-model relative gradient errors; fills `worst_name`.
struct GradCompare {
  double worst = 0, whole = 0;
  std::string worst_name;
};
inline GradCompare compare_grads(const std::vector<HostTensor>& got, const std::vector<HostTensor>& ref) {
  GradCompare c;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    const double e = rel_norm_diff(got[i].values, ref[i].values);
    if (!(e <= c.worst)) c.worst = e, c.worst_name = ref[i].name;
    for (size_t j = 0; j < ref[i].values.size() && j < got[i].values.size(); ++j) {
      const double d = double(got[i].values[j]) - ref[i].values[j];
      num += std::isfinite(d) ? d * d : INFINITY;
      den += double(ref[i].values[j]) * ref[i].values[j];
    }
  }
  c.whole = std::sqrt(num / std::max(den, 1e-300));
  if (got.size() != ref.size()) c.whole = c.worst = INFINITY;
  return c;
}

// An llm.c-format shard (uint16 tokens) of packed documents, each starting with token `eot`: lengths 1 to 150
// (every fifth a single token), so in 128-token samples some are shorter than a 64-row tile, some cross
// samples, and the tokens 1..63 fit vocab 64.
inline void write_packed_document_shard(const std::string& path, int eot) {
  std::vector<uint16_t> tokens;  // (8192+) tokens
  for (int d = 0; tokens.size() < 8192; ++d) {
    tokens.push_back(uint16_t(eot));
    const int len = (d % 5 == 0) ? 1 : 1 + (d * 37) % 150;
    for (int t = 0; t < len; ++t) tokens.push_back(uint16_t(1 + (d * 7 + t * 13) % 63));
  }
  std::vector<int32_t> header(256, 0);  // (256,) llm.c header: magic, version, token count
  header[0] = 20240520, header[1] = 1, header[2] = int32_t(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
}

}  // namespace rt::test
