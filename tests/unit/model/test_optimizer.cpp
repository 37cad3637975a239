// AdamW over the flat parameter buffer against hand-computed fp64 updates (weight decay only on 2-D
// weights, bias correction), global grad-norm clipping, and the warmup + cosine schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tests/unit/test_model_util.h"

namespace rt {
namespace {

using modeltest::LocalModel;
using modeltest::small_config;

OptimConfig test_optim() {
  OptimConfig o;
  o.lr = 1e-2f, o.beta1 = 0.9f, o.beta2 = 0.95f, o.eps = 1e-8f, o.weight_decay = 0.1f, o.grad_clip = 0;
  return o;
}

std::vector<float> random_vector(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(AdamW, TwoStepsMatchHandComputedUpdates) {
  const OptimConfig o = test_optim();
  LocalModel lm(small_config("swiglu", 2, false), ModelOptions{}, 1, 4, &o);
  Model& model = *lm.model;
  AdamW& adam = *lm.optimizer;
  const int64_t P = model.master().numel();
  std::vector<float> p = random_vector(size_t(P), 1, 0.5f);
  std::copy(p.begin(), p.end(), model.master().ptr<float>());
  adam.zero_state();

  std::vector<double> ref_p(p.begin(), p.end()), m(size_t(P), 0), v(size_t(P), 0);
  // Weight decay applies to every 2-D weight and nothing else; an alignment gap belongs to the parameter
  // before it (its values are zero in a real run; here they are random and must follow that rule).
  std::vector<bool> decay(size_t(P), false);
  for (const Model::LocalRun& r : model.local_runs())
    for (int64_t i = r.begin; i < r.end; ++i) decay[size_t(i)] = r.decay;
  ASSERT_EQ(model.local_runs().front().begin, 0);
  ASSERT_EQ(model.local_runs().back().end, P);
  for (const ParamEntry& e : model.params()) {
    EXPECT_EQ(e.decay, e.full_shape.size() == 2) << e.name;
    for (int64_t i = e.offset; i < e.offset + e.numel; ++i) ASSERT_EQ(decay[size_t(i)], e.decay) << e.name;
  }

  for (int step = 1; step <= 2; ++step) {
    const std::vector<float> g = random_vector(size_t(P), 10 + step, 0.1f);
    std::copy(g.begin(), g.end(), model.grads().ptr<float>());
    const float lr = 0.01f * float(step);
    adam.step(step, lr);
    for (int64_t i = 0; i < P; ++i) {
      const size_t k = size_t(i);
      m[k] = o.beta1 * m[k] + (1 - o.beta1) * g[k];
      v[k] = o.beta2 * v[k] + (1 - o.beta2) * double(g[k]) * g[k];
      const double mhat = m[k] / (1 - std::pow(double(o.beta1), step));
      const double vhat = v[k] / (1 - std::pow(double(o.beta2), step));
      const double wd = decay[k] ? o.weight_decay : 0.0;
      ref_p[k] = ref_p[k] - lr * (mhat / (std::sqrt(vhat) + o.eps) + wd * ref_p[k]);
    }
    double num = 0, den = 0;
    const float* got = model.master().ptr<float>();
    for (int64_t i = 0; i < P; ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << i;
      num += (got[i] - ref_p[size_t(i)]) * (got[i] - ref_p[size_t(i)]);
      den += ref_p[size_t(i)] * ref_p[size_t(i)];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-6) << "step " << step;
  }
  EXPECT_FALSE(model.param("norm.weight").decay);
  EXPECT_TRUE(model.param("layers.0.mlp.w2.weight").decay);
}

TEST(AdamW, ClipsByTheGlobalNorm) {
  OptimConfig o = test_optim();
  o.grad_clip = 1.0f;
  LocalModel lm(small_config("gelu", 4, true), ModelOptions{}, 1, 4, &o);
  Model& model = *lm.model;
  model.init_weights(3);
  lm.optimizer->zero_state();
  const int64_t P = model.grads().numel();
  std::vector<float> g(size_t(P), 0.f);
  const std::vector<float> r = random_vector(size_t(P), 5, 1.f);
  double ss = 0;
  for (const ParamEntry& e : model.params())  // only real parameters: the alignment gaps stay zero
    for (int64_t i = 0; i < e.numel; ++i) g[size_t(e.offset + i)] = r[size_t(e.offset + i)], ss += double(r[size_t(e.offset + i)]) * r[size_t(e.offset + i)];
  std::copy(g.begin(), g.end(), model.grads().ptr<float>());
  std::fill(lm.optimizer->m().ptr<float>(), lm.optimizer->m().ptr<float>() + P, std::nanf(""));  // poison
  lm.optimizer->zero_state();
  lm.optimizer->step(1, 1e-3f);
  const double norm = lm.optimizer->last_grad_norm();
  EXPECT_NEAR(norm, std::sqrt(ss), 1e-6 * std::sqrt(ss));
  // The update used the gradients scaled to norm 1 (the first moment is (1 - beta1) g scale); the gradient
  // buffer itself is left as it was (the clip factor is applied inside AdamW, on the device on CUDA).
  const double scale = o.grad_clip / (std::sqrt(ss) + 1e-6);
  const float* m = lm.optimizer->m().ptr<float>();
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_NEAR(m[i], (1 - o.beta1) * g[size_t(i)] * scale, 1e-6) << i;
    EXPECT_EQ(model.grads().ptr<float>()[i], g[size_t(i)]) << i;
  }

  // Below the threshold nothing is scaled.
  OptimConfig loose = o;
  loose.grad_clip = float(10 * std::sqrt(ss));
  LocalModel lm2(small_config("gelu", 4, true), ModelOptions{}, 1, 4, &loose);
  lm2.model->init_weights(3);
  lm2.optimizer->zero_state();
  std::copy(g.begin(), g.end(), lm2.model->grads().ptr<float>());
  lm2.optimizer->step(1, 1e-3f);
  EXPECT_NEAR(lm2.optimizer->last_grad_norm(), std::sqrt(ss), 1e-6 * std::sqrt(ss));
  for (int64_t i = 0; i < 50; ++i)
    EXPECT_FLOAT_EQ(lm2.optimizer->m().ptr<float>()[i], (1 - loose.beta1) * g[size_t(i)]) << i;
}

TEST(LearningRate, WarmupThenCosineToMin) {
  OptimConfig o;
  o.lr = 1.0f, o.min_lr = 0.1f, o.warmup_steps = 10;
  EXPECT_FLOAT_EQ(learning_rate(o, 1, 110), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(o, 5, 110), 0.5f);
  EXPECT_FLOAT_EQ(learning_rate(o, 10, 110), 1.0f);
  EXPECT_NEAR(learning_rate(o, 60, 110), 0.55f, 1e-6);  // halfway: (lr + min_lr) / 2
  EXPECT_NEAR(learning_rate(o, 35, 110), 0.1 + 0.45 * (1 + std::cos(M_PI * 0.25)), 1e-6);
  EXPECT_NEAR(learning_rate(o, 110, 110), 0.1f, 1e-6);
  EXPECT_NEAR(learning_rate(o, 200, 110), 0.1f, 1e-6);  // stays at min_lr past the end
  for (int s = 11; s < 110; ++s) EXPECT_LE(learning_rate(o, s + 1, 110), learning_rate(o, s, 110));
  o.warmup_steps = 0;
  EXPECT_FLOAT_EQ(learning_rate(o, 1, 100), float(0.1 + 0.45 * (1 + std::cos(M_PI * 0.01))));
}

}  // namespace
}  // namespace rt
