// Helpers for the model, optimizer and trainer tests: a Model on a single rank (LocalComm everywhere) with
// an arena sized by a measuring pass, and seeded random batches.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "framework/model/model.h"
#include "framework/model/optimizer.h"
#include "kernels/arena.h"
#include "parallel/comm/comm.h"

namespace rt::modeltest {

inline ModelConfig small_config(const std::string& mlp, int n_kv_head, bool tied) {
  ModelConfig m;
  m.n_layer = 2, m.d_model = 16, m.n_head = 4, m.n_kv_head = n_kv_head, m.vocab_size = 11;
  m.mlp = mlp, m.d_ff = 24, m.tied_embeddings = tied;
  return m;
}

struct LocalModel {
  LocalComm tp, cp, dp_cp;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Model> model;
  std::unique_ptr<AdamW> optimizer;

  LocalModel(const ModelConfig& config, const ModelOptions& options, int64_t batch, int64_t tokens,
             const OptimConfig* optim = nullptr) {
    ModelComms comms;
    comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp;
    size_t bytes = 0;
    {
      Arena measuring = Arena::measuring(Device::cpu());
      Model m(config, options, batch, tokens, comms, measuring);
      if (optim) AdamW a(*optim, m, measuring);
      bytes = measuring.peak();
    }
    arena = std::make_unique<Arena>(Device::cpu(), bytes);
    model = std::make_unique<Model>(config, options, batch, tokens, comms, *arena);
    if (optim) optimizer = std::make_unique<AdamW>(*optim, *model, *arena);
  }
};

// Random tokens; targets are the next tokens (the last of each sequence ignored); positions 0..n-1.
inline Batch random_batch(int vocab, int64_t batch, int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  Batch b;
  b.batch = batch, b.tokens_per_rank = tokens;
  std::vector<int32_t> seq(size_t(tokens + 1));
  for (int64_t s = 0; s < batch; ++s) {
    for (auto& t : seq) t = tok(rng);
    for (int64_t i = 0; i < tokens; ++i) {
      b.tokens.push_back(seq[size_t(i)]);
      b.targets.push_back(i + 1 < tokens ? seq[size_t(i + 1)] : -1);
      b.groups.push_back(0);
    }
  }
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t i = 0; i < tokens; ++i) b.positions.push_back(int32_t(i));  // (B, n)
  return b;
}

inline double mean_loss(const std::vector<float>& losses, double count) {
  double s = 0;
  for (float l : losses) s += l;
  return s / count;
}

// Overwrites the master weights with seeded normal values (std `scale`; norms 1 + scale * noise), so that
// every parameter matters and gradients are far from zero.
inline void randomize_weights(Model& model, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> host(size_t(model.master().numel()), 0.f);
  for (const ParamEntry& e : model.params())
    for (int64_t i = 0; i < e.numel; ++i)
      host[size_t(e.offset + i)] = e.init_std == 0 ? 1.f + scale * normal(rng) : scale * normal(rng);
  std::copy(host.begin(), host.end(), model.master().ptr<float>());
  model.sync_compute_weights();
}

// The gradient of the mean loss along a random unit direction u of parameter e: `analytic` from `grads` (the
// model's full gradient at the current weights), `numeric` = (L(p + eps u) - L(p - eps u)) / (2 eps) from two
// more forwards on `batch`; err = |numeric - analytic| / max(|numeric|, 1e-3). The weights are restored.
struct DirectionalCheck {
  double analytic = 0, numeric = 0, err = 0;
};
inline DirectionalCheck directional_check(Model& model, const Batch& batch, double count, const ParamEntry& e,
                                          const std::vector<float>& grads, std::mt19937_64& rng, double eps) {
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> u(size_t(e.numel));  // (numel) the direction
  double norm = 0;
  for (double& x : u) x = normal(rng), norm += x * x;
  norm = std::sqrt(norm);
  DirectionalCheck c;
  for (int64_t i = 0; i < e.numel; ++i) {
    u[size_t(i)] /= norm;
    c.analytic += grads[size_t(e.offset + i)] * u[size_t(i)];
  }
  float* p = model.master().ptr<float>();
  const std::vector<float> saved(p + e.offset, p + e.offset + e.numel);
  auto loss_at = [&](double t) {
    for (int64_t i = 0; i < e.numel; ++i) p[e.offset + i] = float(saved[size_t(i)] + t * u[size_t(i)]);
    model.sync_compute_weights();
    return mean_loss(model.step(batch, count, false), count);
  };
  c.numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
  std::copy(saved.begin(), saved.end(), p + e.offset);
  model.sync_compute_weights();
  c.err = std::fabs(c.numeric - c.analytic) / std::max(std::fabs(c.numeric), 1e-3);
  return c;
}

}  // namespace rt::modeltest
