// precision fp8: the attention side's linear GEMMs (QKV, wo; forward, data and weight gradient) run in token chunks
// of the MLP chunk (framework/model/fp8_linear.h), with the scaling groups of the whole (N, .) tensors. Checked:
//   - per recipe and checkpointing mode, chunks of N/4 (a multiple of 128) against RT_FP8_ATTENTION_CHUNKS=0 (all N
//     tokens at once, as before the chunks) with the same MLP chunk: the same step-1 loss and gradients up to the
//     weight gradients' f32 sums over the chunks. A chunk-local amax (another scaling group) would move the
//     attention gradients by FP8 rounding steps (~1e-2), far beyond the bound;
//   - the arena: what fp8 adds over bf16 under checkpointing selective and full is sized by the chunk, not by the
//     tokens (the same at N and 2N); with the attention side unchunked it grows with N (the control).
// Observed 2026-12-03 (printed as "[ fp8 chunks ]"): see the report lines; bounds below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/unit/test_model_util.h"

namespace rt {
namespace {

using modeltest::LocalModel;
using modeltest::random_batch;
using modeltest::randomize_weights;

// Sets RT_FP8_ATTENTION_CHUNKS for one scope ("" leaves it unset).
struct AttentionChunksEnv {
  explicit AttentionChunksEnv(const char* v) {
    if (*v) setenv("RT_FP8_ATTENTION_CHUNKS", v, 1);
    else unsetenv("RT_FP8_ATTENTION_CHUNKS");
  }
  ~AttentionChunksEnv() { unsetenv("RT_FP8_ATTENTION_CHUNKS"); }
};

// Every dimension a multiple of 128 (the block recipe's tiling): C 128, 2 heads of 64, d_ff 256.
ModelConfig fp8_config(const std::string& mlp) {
  ModelConfig m;
  m.n_layer = 2, m.d_model = 128, m.n_head = 2, m.n_kv_head = 2, m.vocab_size = 64;
  m.mlp = mlp, m.d_ff = 256, m.tied_embeddings = false;
  return m;
}

ModelOptions fp8_options(Fp8Recipe recipe, ActivationCheckpointing ckpt, int64_t mlp_chunk) {
  ModelOptions o;
  o.fp8 = true, o.fp8_recipe = recipe, o.checkpointing = ckpt, o.mlp_chunk = mlp_chunk, o.lm_head_chunk = 64;
  return o;
}

double relative_l2(const float* out, const float* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(out[i]) - double(ref[i]);
    num += d * d, den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Case {
  const char* name;
  Fp8Recipe recipe;
  ActivationCheckpointing ckpt;
  const char* mlp;
};

class Fp8AttentionChunks : public ::testing::TestWithParam<Case> {};

// N = 2 x 256 = 512 tokens; chunks of 128 (N/4) for the MLP and, in the chunked model, for the attention side.
TEST_P(Fp8AttentionChunks, MatchWholeTensorsLossAndGradients) {
  const Case c = GetParam();
  const ModelConfig cfg = fp8_config(c.mlp);
  const int64_t B = 2, n = 256, chunk = 128;
  const ModelOptions options = fp8_options(c.recipe, c.ckpt, chunk);
  std::unique_ptr<LocalModel> whole, chunked;
  {
    AttentionChunksEnv env("0");
    whole = std::make_unique<LocalModel>(cfg, options, B, n);
  }
  {
    AttentionChunksEnv env("");
    chunked = std::make_unique<LocalModel>(cfg, options, B, n);
  }
  randomize_weights(*whole->model, 17, 0.3f);
  randomize_weights(*chunked->model, 17, 0.3f);
  const Batch batch = random_batch(cfg.vocab_size, B, n, 23);
  const double count = whole->model->global_target_count(batch);
  for (LocalModel* m : {whole.get(), chunked.get()})
    std::fill_n(m->model->grads().ptr<float>(), m->model->grads().numel(), std::nanf(""));  // poison
  const std::vector<float> lw = whole->model->step(batch, count, true);
  const std::vector<float> lc = chunked->model->step(batch, count, true);
  ASSERT_EQ(lw.size(), lc.size());
  double loss_err = 0, grad_err = 0;
  for (size_t i = 0; i < lw.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lc[i])) << "loss " << i;
    loss_err = std::max(loss_err, std::fabs(double(lc[i]) - lw[i]) / std::max(1.0, std::fabs(double(lw[i]))));
  }
  EXPECT_LE(loss_err, 1e-6);
  const Tensor gw = whole->model->grads(), gc = chunked->model->grads();
  for (int64_t i = 0; i < gc.numel(); ++i) ASSERT_TRUE(std::isfinite(gc.ptr<float>()[i])) << "grad " << i;
  for (const ParamEntry& e : whole->model->params()) {  // per tensor: the attention weights' cannot hide
    const double err = relative_l2(gc.ptr<float>() + e.offset, gw.ptr<float>() + e.offset, e.numel);
    grad_err = std::max(grad_err, err);
    EXPECT_LE(err, 1e-5) << e.name;
  }
  std::printf("[ fp8 chunks ] %s: step-1 loss rel diff %.2e, max per-tensor gradient rel L2 %.2e\n", c.name, loss_err,
              grad_err);
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, Fp8AttentionChunks,
    ::testing::Values(Case{"tensorwise_none", Fp8Recipe::tensorwise, ActivationCheckpointing::none, "gelu"},
                      Case{"tensorwise_selective", Fp8Recipe::tensorwise, ActivationCheckpointing::selective, "gelu"},
                      Case{"tensorwise_full_swiglu", Fp8Recipe::tensorwise, ActivationCheckpointing::full, "swiglu"},
                      Case{"rowwise_none", Fp8Recipe::rowwise, ActivationCheckpointing::none, "gelu"},
                      Case{"rowwise_selective", Fp8Recipe::rowwise, ActivationCheckpointing::selective, "swiglu"},
                      Case{"rowwise_full", Fp8Recipe::rowwise, ActivationCheckpointing::full, "gelu"},
                      Case{"block_none", Fp8Recipe::block, ActivationCheckpointing::none, "swiglu"},
                      Case{"block_selective", Fp8Recipe::block, ActivationCheckpointing::selective, "gelu"},
                      Case{"block_full", Fp8Recipe::block, ActivationCheckpointing::full, "gelu"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// The measured arena of one rank (Arena::measuring, as `ringtrain plan` measures it).
double arena_bytes(bool fp8, ActivationCheckpointing ckpt, int64_t tokens, int64_t chunk) {
  ModelOptions o = fp8_options(Fp8Recipe::tensorwise, ckpt, chunk);
  o.fp8 = fp8;
  LocalComm tp, cp, dp_cp;
  ModelComms comms;
  comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp;
  Arena measuring = Arena::measuring(Device::cpu());
  Model m(fp8_config("gelu"), o, 1, tokens, comms, measuring);
  return double(measuring.peak());
}

TEST(Fp8AttentionChunksMemory, WhatFp8AddsIsSizedByTheChunkNotTheTokens) {
  const int64_t chunk = 512;
  for (const ActivationCheckpointing ckpt : {ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
    const char* name = ckpt == ActivationCheckpointing::full ? "full" : "selective";
    double extra[2][2];  // [attention chunked][N, 2N]: fp8 arena - bf16 arena
    for (int chunked = 0; chunked < 2; ++chunked) {
      AttentionChunksEnv env(chunked ? "" : "0");
      for (int k = 0; k < 2; ++k) {
        const int64_t N = 4096 << k;
        const double fp8 = arena_bytes(true, ckpt, N, chunk), bf16 = arena_bytes(false, ckpt, N, chunk);
        extra[chunked][k] = fp8 - bf16;
        std::printf("[ fp8 chunks ] %s, N %lld, attention %s: fp8 arena %.3f MiB, bf16 %.3f MiB (%.4fx)\n", name,
                    (long long)N, chunked ? "chunked" : "whole", fp8 / 1048576, bf16 / 1048576, fp8 / bf16);
      }
    }
    // Chunked: the same at N and 2N up to the guard's per-chunk record (12 bytes per layer, site and chunk).
    EXPECT_LE(extra[1][1] - extra[1][0], 0.02 * extra[1][0]) << name;
    EXPECT_LT(extra[1][1], extra[0][1]) << name;
    // The control: with the attention side over all N tokens it grows with N.
    EXPECT_GT(extra[0][1] - extra[0][0], 0.5 * extra[0][0]) << name;
  }
}

}  // namespace
}  // namespace rt
