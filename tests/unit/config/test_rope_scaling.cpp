// RoPE scaling: the host fp64 frequencies per type (framework/config/rope_scaling.h) against values worked out by
// hand from transformers' formulas; the rope op with arbitrary frequencies and a cos/sin scale against fp64
// (forward, and the backward as the transpose by central differences); the model.rope_scaling config group
// (nested YAML, --set, errors naming the key, and the resolved YAML round trip).
#include <gtest/gtest.h>

#include <cmath>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"
#include "framework/hf/init_from.h"
#include "framework/config/rope_scaling.h"
#include "kernels/ops.h"
#include "tests/unit/test_reference.h"
#include "tests/unit/test_util.h"

namespace rt {
namespace {
using test::HostTensor;

constexpr double kPi = 3.14159265358979323846;

ModelConfig llama31_like() {
  ModelConfig m;
  m.d_model = 2048, m.n_head = 16, m.n_kv_head = 4;  // head_dim 128
  m.rope_base = 500000.f;
  m.rope_scaling.type = "llama3";
  m.rope_scaling.factor = 8, m.rope_scaling.low_freq_factor = 1, m.rope_scaling.high_freq_factor = 4;
  m.rope_scaling.original_max_position_embeddings = 8192;
  return m;
}

TEST(RopeScaling, Llama3KeepsHighDividesLowAndBlendsBetween) {
  const ModelConfig m = llama31_like();
  const RopeFreqs f = rope_frequencies(m);
  ASSERT_EQ(f.pairs, 64);
  EXPECT_EQ(f.cos_sin_scale, 1.f);
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double inv = std::pow(500000.0, -2.0 * i / 128.0);
    const double wavelen = 2 * kPi / inv;
    double want;
    if (wavelen < 8192.0 / 4) want = inv, ++kept;
    else if (wavelen > 8192.0 / 1) want = inv / 8, ++divided;
    else {
      const double s = (8192.0 / wavelen - 1) / (4 - 1);
      want = (1 - s) * inv / 8 + s * inv, ++blended;
    }
    EXPECT_NEAR(f.inv_freq[i], want, 1e-15 * inv) << i;
  }
  EXPECT_GT(kept, 0);  // all three regimes occur for Llama 3.1's parameters
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

TEST(RopeScaling, LinearAndYarn) {
  ModelConfig m = llama31_like();
  m.rope_scaling.type = "linear";
  m.rope_scaling.factor = 4;
  RopeFreqs f = rope_frequencies(m);
  for (int i = 0; i < f.pairs; ++i) EXPECT_DOUBLE_EQ(f.inv_freq[i], std::pow(500000.0, -2.0 * i / 128.0) / 4);

  // yarn, head_dim 128, base 10000, orig 4096, factor 4: ramp dims floor(d(32)) .. ceil(d(1)).
  m.rope_base = 10000.f;
  m.rope_scaling.type = "yarn";
  m.rope_scaling.original_max_position_embeddings = 4096;
  m.rope_scaling.beta_fast = 32, m.rope_scaling.beta_slow = 1, m.rope_scaling.attention_factor = 0;
  f = rope_frequencies(m);
  auto corr = [](double r) { return 128 * std::log(4096 / (r * 2 * kPi)) / (2 * std::log(10000.0)); };
  const double low = std::floor(corr(32)), high = std::ceil(corr(1));
  ASSERT_LT(low, high);
  for (int i = 0; i < 64; ++i) {
    const double inv = std::pow(10000.0, -2.0 * i / 128.0);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    EXPECT_NEAR(f.inv_freq[i], inv / 4 * ramp + inv * (1 - ramp), 1e-15 * inv) << i;
  }
  EXPECT_FLOAT_EQ(f.cos_sin_scale, float(0.1 * std::log(4.0) + 1));
  m.rope_scaling.attention_factor = 1.25;
  EXPECT_FLOAT_EQ(rope_frequencies(m).cos_sin_scale, 1.25f);
}

TEST(RopeScaling, BadParametersNameTheKey) {
  ModelConfig m = llama31_like();
  m.rope_scaling.high_freq_factor = 1;
  EXPECT_NE(test::error_of([&] { rope_frequencies(m); }).find("model.rope_scaling.low_freq_factor=1 and high_freq_factor=1"),
            std::string::npos);
  m = llama31_like();
  m.rope_scaling.type = "dynamic";
  EXPECT_NE(test::error_of([&] { rope_frequencies(m); }).find("model.rope_scaling.type='dynamic' is not a valid choice"),
            std::string::npos);
  m = llama31_like();
  m.rope_scaling.factor = 0;
  EXPECT_NE(test::error_of([&] { rope_frequencies(m); }).find("model.rope_scaling.factor=0 must be > 0"), std::string::npos);
}

// x (B,T,H,D): pairs (i, i+D/2) rotated by pos * inv[i] and scaled by s.
std::vector<double> rope_ref(const std::vector<double>& x, const std::vector<int32_t>& pos, int64_t B, int64_t T,
                             int64_t H, int64_t D, const RopeFreqs& f) {
  std::vector<double> y(x.size());
  const int64_t half = D / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double a = double(pos[size_t(t)]) * f.inv_freq[i], s = f.cos_sin_scale;
          const size_t o = size_t(((b * T + t) * H + h) * D);
          const double x1 = x[o + i], x2 = x[o + i + half];
          y[o + i] = s * (x1 * std::cos(a) - x2 * std::sin(a));
          y[o + i + half] = s * (x1 * std::sin(a) + x2 * std::cos(a));
        }
  return y;
}

TEST(RopeScaling, OpWithScaledFrequenciesMatchesFp64AndItsTranspose) {
  const int64_t B = 2, T = 5, H = 2, D = 16;
  ModelConfig m;
  m.d_model = 32, m.n_head = 2;
  m.rope_scaling.type = "yarn";
  m.rope_scaling.factor = 8;
  m.rope_scaling.original_max_position_embeddings = 64;
  const RopeFreqs f = rope_frequencies(m);
  ASSERT_GT(f.cos_sin_scale, 1.1f);
  const std::vector<int32_t> posv{0, 3, 70, 4095, 200000};
  HostTensor pos = test::i32({T});
  for (int64_t t = 0; t < T; ++t) pos.i()[t] = posv[size_t(t)];
  HostTensor x = test::random_f32({B, T, H, D}, 5);
  const auto x0 = x.to_double();
  rope(x, pos, f, false);
  EXPECT_LT(test::rel_err(x, rope_ref(x0, posv, B, T, H, D, f)), 1e-6);
  HostTensor dout = test::random_f32({B, T, H, D}, 6);
  const auto fd = test::fd_grad([&](const std::vector<double>& v) { return rope_ref(v, posv, B, T, H, D, f); }, x0,
                                dout.to_double());
  rope(dout, pos, f, true);  // dx = (s R)^T dout
  EXPECT_LT(test::rel_err(dout, fd), 1e-6);
}

TEST(RopeScaling, ConfigGroupParsesNestedAndSetAndRoundTrips) {
  const std::string yaml =
      "model:\n  d_model: 64\n  n_head: 1\n  n_kv_head: 1\n  rope_base: 500000\n  rope_scaling:\n    type: llama3\n"
      "    factor: 8\n    original_max_position_embeddings: 8192\ndata:\n  seq_len: 64\ntrain:\n  batch_size: 2\n"
      "  run_dir: /tmp/rt_rope_scaling_unused\ndevice: cpu\n";
  Config c = parse_config_text(yaml, {"model.rope_scaling.high_freq_factor=4"}, 0);
  EXPECT_EQ(c.model.rope_scaling.type, "llama3");
  EXPECT_EQ(c.model.rope_scaling.factor, 8);
  EXPECT_EQ(c.model.rope_scaling.high_freq_factor, 4);
  EXPECT_TRUE(c.is_explicit("model.rope_scaling.factor"));
  EXPECT_FALSE(c.is_explicit("model.rope_scaling.beta_fast"));
  const Config back = parse_config_text(config_to_yaml(c), {}, 0);
  EXPECT_EQ(model_config_hash(back), model_config_hash(c));
  EXPECT_EQ(back.model.rope_scaling.original_max_position_embeddings, 8192);
  // Unscaled configs hash as before the group existed (older checkpoints still resume).
  Config plain = c;
  plain.model.rope_scaling = RopeScalingConfig{};
  Config other = plain;
  other.model.rope_scaling.factor = 3;  // ignored while type is none
  EXPECT_EQ(model_config_hash(plain), model_config_hash(other));
  const std::string bad = test::error_of([&] { parse_config_text(yaml, {"model.rope_scaling.factr=2"}, 0); });
  EXPECT_NE(bad.find("unknown key 'model.rope_scaling.factr' (did you mean 'model.rope_scaling.factor'?)"),
            std::string::npos) << bad;
  std::string y2 = yaml;
  y2.replace(y2.find("    factor: 8"), 13, "    factor: 8\n    colour: red");
  const std::string bad2 = test::error_of([&] { parse_config_text(y2, {}, 0); });
  EXPECT_NE(bad2.find(":9: unknown key 'model.rope_scaling.colour'"), std::string::npos) << bad2;
  const std::string bad3 = test::error_of([&] { parse_config_text(yaml, {"model.rope_scaling.type=ntk"}, 0); });
  EXPECT_NE(bad3.find("model.rope_scaling.type='ntk' is not a valid choice"), std::string::npos) << bad3;
}

// The checkpoint metadata carries the scaling: model_config_from_metadata(model_metadata(m)) rebuilds m, and
// metadata written before rope_scaling existed reads as unscaled.
TEST(RopeScaling, CheckpointMetadataRoundTrips) {
  ModelConfig m = llama31_like();
  m.rope_scaling.type = "yarn";
  m.rope_scaling.attention_factor = 1.0625;
  m.rope_scaling.beta_fast = 16;
  Config a, b;
  a.model = m;
  b.model = model_config_from_metadata(model_metadata(m), "test");
  EXPECT_EQ(model_config_hash(a), model_config_hash(b));
  EXPECT_EQ(b.model.rope_scaling.attention_factor, 1.0625);
  auto old = model_metadata(ModelConfig{});
  for (auto it = old.begin(); it != old.end();) it = it->first.rfind("rope_scaling.", 0) == 0 ? old.erase(it) : ++it;
  EXPECT_EQ(model_config_from_metadata(old, "old").rope_scaling.type, "none");
  old.erase("d_model");
  EXPECT_NE(test::error_of([&] { model_config_from_metadata(old, "old"); }).find("lacks 'd_model'"), std::string::npos);
}

}  // namespace
}  // namespace rt
