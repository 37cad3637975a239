// fp8.attention in the model (ModelOptions::fp8_attention -> RingAttention::set_fp8_backward, kernels/attn_fp8.h) on
// a CPU rank: the attention backward takes the FP8 ops (the step-1 gradients of the attention weights move by FP8
// rounding against FP8 linear layers alone, the MLP's first-layer weights too, and every gradient stays finite),
// and a short training run on a learnable task keeps the loss within a stated bound of FP8 linear layers alone.
// Observed 2026-12-03 (printed as "[ fp8 attention train ]"): step-1 gradients of layer 0's wq / wk / wv 2.3-3.4e-2
// from FP8 linear alone, layer 1's 1.2-2.1e-2, everything after layer 1's attention (its wo, MLP, the head) equal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/test_model_util.h"

namespace rt {
namespace {

using modeltest::LocalModel;
using modeltest::randomize_weights;

// Head dim 64 (FP8 attention's), every dimension a multiple of 128: C 128, 2 heads, GQA off, d_ff 256.
ModelConfig config() {
  ModelConfig m;
  m.n_layer = 2, m.d_model = 128, m.n_head = 2, m.n_kv_head = 2, m.vocab_size = 64;
  m.mlp = "swiglu", m.d_ff = 256, m.tied_embeddings = false;
  return m;
}

ModelOptions options(bool fp8_attention) {
  ModelOptions o;
  o.fp8 = true, o.fp8_recipe = Fp8Recipe::tensorwise, o.fp8_attention = fp8_attention, o.lm_head_chunk = 128;
  return o;
}

OptimConfig optim() {
  OptimConfig o;
  o.lr = 3e-3f, o.weight_decay = 0.f, o.grad_clip = 1.f;
  return o;
}

// A task the attention must learn: each sample is a random block of 32 tokens repeated, so from the second copy on
// every next token is found by looking 32 positions back. Positions 0..n-1.
Batch repeated_batch(int vocab, int64_t B, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  Batch b;
  b.batch = B, b.tokens_per_rank = n;
  for (int64_t s = 0; s < B; ++s) {
    std::vector<int32_t> block(32);
    for (int32_t& t : block) t = tok(rng);
    for (int64_t i = 0; i < n; ++i) {
      b.tokens.push_back(block[size_t(i % 32)]);
      b.targets.push_back(i + 1 < n ? block[size_t((i + 1) % 32)] : -1);
      b.groups.push_back(0);
    }
  }
  for (int64_t s = 0; s < B; ++s)
    for (int64_t i = 0; i < n; ++i) b.positions.push_back(int32_t(i));
  return b;
}

double relative_l2(const float* out, const float* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(out[i]) - double(ref[i]);
    num += d * d, den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double mean(const std::vector<float>& losses, double count) {
  double s = 0;
  for (float l : losses) s += l;
  return s / count;
}

constexpr int64_t kB = 2, kN = 256;

TEST(Fp8AttentionTrain, TheBackwardTakesTheFp8Ops) {
  LocalModel linear(config(), options(false), kB, kN), both(config(), options(true), kB, kN);
  EXPECT_FALSE(linear.model->attention().ring().fp8_backward());
  EXPECT_TRUE(both.model->attention().ring().fp8_backward());
  randomize_weights(*linear.model, 5, 0.05f);
  randomize_weights(*both.model, 5, 0.05f);
  const Batch batch = repeated_batch(config().vocab_size, kB, kN, 9);
  const double count = linear.model->global_target_count(batch);
  for (LocalModel* m : {&linear, &both})
    std::fill_n(m->model->grads().ptr<float>(), m->model->grads().numel(), std::nanf(""));  // poison
  const double l0 = mean(linear.model->step(batch, count, true), 1.0);
  const double l1 = mean(both.model->step(batch, count, true), 1.0);
  EXPECT_EQ(l0, l1) << "the forward is the same: only the backward differs";
  const Tensor g0 = linear.model->grads(), g1 = both.model->grads();
  for (int64_t i = 0; i < g1.numel(); ++i) ASSERT_TRUE(std::isfinite(g1.ptr<float>()[i])) << "grad " << i;
  double attn = 0, head = 1;
  for (const ParamEntry& e : linear.model->params()) {
    const double d = relative_l2(g1.ptr<float>() + e.offset, g0.ptr<float>() + e.offset, e.numel);
    if (e.name.find("attn.wq") != std::string::npos || e.name.find("attn.wk") != std::string::npos ||
        e.name.find("attn.wv") != std::string::npos)
      attn = std::max(attn, d);
    if (e.name.find("lm_head") != std::string::npos) head = d;  // after the last attention: untouched
    std::printf("[ fp8 attention train ] step-1 gradient %s: rel L2 against fp8 linear only %.2e\n", e.name.c_str(), d);
  }
  EXPECT_GT(attn, 1e-3) << "the attention's input-side gradients did not move: the FP8 ops were not taken";
  EXPECT_LT(attn, 0.2);
  EXPECT_EQ(head, 0.0);
}

// The losses of `steps` AdamW steps on one batch of the repeated-block task from seeded weights.
std::vector<double> train_losses(const ModelOptions& opts, int steps) {
  const OptimConfig o = optim();
  LocalModel lm(config(), opts, kB, kN, &o);
  randomize_weights(*lm.model, 5, 0.05f);
  lm.optimizer->zero_state();
  const Batch batch = repeated_batch(config().vocab_size, kB, kN, 100);  // the same batch every step
  const double count = lm.model->global_target_count(batch);
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    losses.push_back(mean(lm.model->step(batch, count, true), count));
    lm.optimizer->step(step, o.lr);
  }
  return losses;
}

double mean_of(const std::vector<double>& v, size_t from, size_t to) {  // steps [from, to], 1-based
  double s = 0;
  for (size_t i = from; i <= to; ++i) s += v[i - 1];
  return s / double(to - from + 1);
}

// 15 AdamW steps on one batch from the same weights (the loss falls from 4.35 to ~0.15: the task is learned, the
// values still far from 0). The bound: the fp8.attention run's mean loss over steps 6-15 within 5% of the FP8 linear
// layers' alone, every loss finite, and the run well below its start. The f32 run (train.precision bf16 on the CPU)
// is printed beside them: the FP8 linear layers' own distance from it is the scale to judge by.
// Observed 2026-12-03 over 7 weight / batch seeds: fp8.attention against FP8 linear alone +2.04% (this seed), +1.50,
// -0.34, +0.29, -0.11, -0.67, -0.40%; FP8 linear against f32 -0.38% (this seed), -2.87 to +3.26%: no bias of the FP8
// backward shows beyond the FP8 linear layers' own spread.
TEST(Fp8AttentionTrain, LossStaysWithinABoundOfFp8LinearOnly) {
  ModelOptions f32 = options(false);
  f32.fp8 = false;
  const std::vector<double> l32 = train_losses(f32, 15), lin = train_losses(options(false), 15),
                            att = train_losses(options(true), 15);
  for (size_t i = 0; i < att.size(); ++i) ASSERT_TRUE(std::isfinite(att[i])) << "step " << i + 1;
  for (size_t step : {1, 5, 10, 15})
    std::printf("[ fp8 attention train ] step %2zu loss: f32 %.4f, fp8 linear %.4f, fp8 linear + fp8.attention %.4f\n",
                step, l32[step - 1], lin[step - 1], att[step - 1]);
  const double m32 = mean_of(l32, 6, 15), mlin = mean_of(lin, 6, 15), matt = mean_of(att, 6, 15);
  std::printf("[ fp8 attention train ] mean loss of steps 6-15: f32 %.4f, fp8 linear %.4f (%+.2f%%), + fp8.attention "
              "%.4f (%+.2f%% against fp8 linear)\n",
              m32, mlin, 100 * (mlin / m32 - 1), matt, 100 * (matt / mlin - 1));
  EXPECT_EQ(att[0], lin[0]) << "step 1's forward is the same";
  EXPECT_LT(att.back(), 0.2 * att[0]) << "the task was not learned: the comparison would say nothing";
  EXPECT_LT(std::fabs(matt / mlin - 1), 0.05);
}

}  // namespace
}  // namespace rt
