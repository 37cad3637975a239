// Token-chunked MLP (train.mlp_chunk): the same losses and gradients as the unchunked model (GELU and SwiGLU,
// every checkpointing mode), less arena; the auto rule; and `ringtrain plan`'s sizing of the 1.41B 512K
// config (within an H200 with headroom) and of a tiny config (unchanged by the rule).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "framework/plan/plan.h"
#include "framework/run/trainer.h"
#include "framework/plan/trainer_setup.h"
#include "tests/unit/test_model_util.h"

namespace rt {
namespace {

using modeltest::LocalModel;
using modeltest::random_batch;
using modeltest::randomize_weights;
using modeltest::small_config;

struct ChunkCase {
  const char* name;
  std::string mlp;
  ActivationCheckpointing ckpt;
};

class MlpChunk : public ::testing::TestWithParam<ChunkCase> {};

double relative_l2(const float* out, const float* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(out[i]) - double(ref[i]);
    num += d * d, den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

// Chunks of 5 tokens over N = 2 x 9 = 18 tokens: 5, 5, 5, 3 (the last one partial).
TEST_P(MlpChunk, MatchesUnchunkedLossesAndGradients) {
  const ChunkCase c = GetParam();
  ModelConfig cfg = small_config(c.mlp, 2, false);
  cfg.d_ff = 40;
  const int64_t B = 2, n = 9;
  ModelOptions whole, chunked;
  whole.checkpointing = chunked.checkpointing = c.ckpt;
  whole.lm_head_chunk = chunked.lm_head_chunk = 4;
  whole.mlp_chunk = 0;
  chunked.mlp_chunk = 5;
  LocalModel a(cfg, whole, B, n), b(cfg, chunked, B, n);
  EXPECT_LT(b.arena->capacity(), a.arena->capacity());  // the (N, d_ff) scratch became (5, d_ff)
  randomize_weights(*a.model, 17, 0.3f);
  randomize_weights(*b.model, 17, 0.3f);
  const Batch batch = random_batch(cfg.vocab_size, B, n, 23);
  const double count = a.model->global_target_count(batch);

  for (LocalModel* m : {&a, &b})
    std::fill_n(m->model->grads().ptr<float>(), m->model->grads().numel(), std::nanf(""));  // poison
  const std::vector<float> la = a.model->step(batch, count, true);
  const std::vector<float> lb = b.model->step(batch, count, true);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lb[i])) << "loss " << i;
    EXPECT_NEAR(lb[i], la[i], 1e-6 * std::max(1.f, std::fabs(la[i]))) << "loss " << i;
  }
  const Tensor ga = a.model->grads(), gb = b.model->grads();
  ASSERT_EQ(ga.numel(), gb.numel());
  for (int64_t i = 0; i < gb.numel(); ++i) ASSERT_TRUE(std::isfinite(gb.ptr<float>()[i])) << "grad " << i;
  // Per tensor, so a wrong MLP gradient cannot hide behind the large embedding gradients.
  for (const ParamEntry& e : a.model->params()) {
    const double err = relative_l2(gb.ptr<float>() + e.offset, ga.ptr<float>() + e.offset, e.numel);
    EXPECT_LT(err, 1e-6) << e.name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, MlpChunk,
    ::testing::Values(ChunkCase{"gelu_none", "gelu", ActivationCheckpointing::none},
                      ChunkCase{"gelu_selective", "gelu", ActivationCheckpointing::selective},
                      ChunkCase{"gelu_full", "gelu", ActivationCheckpointing::full},
                      ChunkCase{"swiglu_none", "swiglu", ActivationCheckpointing::none},
                      ChunkCase{"swiglu_selective", "swiglu", ActivationCheckpointing::selective},
                      ChunkCase{"swiglu_full", "swiglu", ActivationCheckpointing::full}),
    [](const ::testing::TestParamInfo<ChunkCase>& info) { return std::string(info.param.name); });

TEST(MlpChunkRule, AutoChunksOnlyLargeHiddenBuffers) {
  EXPECT_EQ(resolve_mlp_chunk(-1, 512, 64), 512);               // tiny: unchanged
  EXPECT_EQ(resolve_mlp_chunk(-1, 16384, 8192), 16384);         // exactly 2^27 elements: unchanged
  EXPECT_EQ(resolve_mlp_chunk(-1, 65536, 8192), 16384);         // 1.41B at 64K
  // fp8 under selective or full checkpointing: a 2^26 budget; fp8 without checkpointing keeps 2^27.
  const ActivationCheckpointing sel = ActivationCheckpointing::selective, full = ActivationCheckpointing::full;
  EXPECT_EQ(resolve_mlp_chunk(-1, 65536, 8192, true, sel), 8192);
  EXPECT_EQ(resolve_mlp_chunk(-1, 65536, 8192, true, ActivationCheckpointing::none), 16384);
  EXPECT_EQ(resolve_mlp_chunk(-1, 65536, 8192, false, sel), 16384);
  EXPECT_EQ(resolve_mlp_chunk(-1, 8192, 8192, true, sel), 8192);       // exactly 2^26 elements: unchanged
  EXPECT_EQ(resolve_mlp_chunk(-1, 262144, 14336, true, full), 4608);   // the 8B shape at 2M on 8 ranks (bf16: 9216)
  EXPECT_EQ(resolve_mlp_chunk(1000, 65536, 8192, true, full), 1000);   // an explicit chunk is kept
  EXPECT_EQ(resolve_mlp_chunk(-1, 524288, 8192), 16384);        // 1.41B at 512K
  EXPECT_EQ(resolve_mlp_chunk(-1, 131072, 3072), 43520);        // 125M at 128K: a multiple of 256
  EXPECT_EQ(resolve_mlp_chunk(-1, 1 << 20, 1 << 20), 256);      // at least 256 tokens
  EXPECT_EQ(resolve_mlp_chunk(0, 524288, 8192), 524288);        // 0: no chunking
  EXPECT_EQ(resolve_mlp_chunk(1000, 524288, 8192), 1000);
  EXPECT_EQ(resolve_mlp_chunk(1000, 300, 8192), 300);
  EXPECT_THROW(resolve_mlp_chunk(-2, 100, 8), Error);
}

// The arena `ringtrain plan` measures (rank 0 of a one-rank grid) plus the stated non-arena allowance.
double planned_bytes(const Config& config, Device device) {
  LocalComm tp, cp, dp_cp;
  ModelComms comms;
  comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp;
  const ModelSession s = measure_session(config, comms, device, /*with_optimizer=*/true);
  return double(s.arena->peak()) + non_arena_allowance_bytes(device);
}

TEST(MlpChunkPlan, Gpt1b512kFitsAnH200WithHeadroom) {
  const Config c = load_config(std::string(RINGTRAIN_SOURCE_DIR) + "/configs/gpt-1b-512k.yaml", {}, 0);
  ASSERT_EQ(c.data.seq_len, 524288);
  ASSERT_EQ(c.device, "cuda");
  const double gib = 1024.0 * 1024 * 1024;
  const double total = planned_bytes(c, Device::cuda(0));
  EXPECT_LE(total, 130 * gib) << "planned " << total / gib << " GiB";
  EXPECT_GE(total, 60 * gib) << "planned " << total / gib << " GiB: the 50 GiB residual stream alone is more";
  EXPECT_GE(non_arena_allowance_bytes(Device::cuda(0)), 1.0 * gib);
  EXPECT_EQ(non_arena_allowance_bytes(Device::cpu()), 0.0);
}

TEST(MlpChunkPlan, TinyConfigIsUnchangedByTheAutoRule) {
  Config c = load_config(std::string(RINGTRAIN_SOURCE_DIR) + "/configs/tiny.yaml", {}, 0);
  c.parallel.cp = 1, c.parallel.dp = 1, c.parallel.tp = 1;
  c.train.mlp_chunk = -1;
  const double automatic = planned_bytes(c, Device::cpu());
  c.train.mlp_chunk = 0;
  EXPECT_EQ(automatic, planned_bytes(c, Device::cpu()));
  c.train.mlp_chunk = 8;  // a forced chunk does change it
  EXPECT_LT(planned_bytes(c, Device::cpu()), automatic);
}

}  // namespace
}  // namespace rt
