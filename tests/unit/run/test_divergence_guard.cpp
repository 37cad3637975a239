// The divergence guard: the CPU kernels skip a step whose norm is not finite (and count it), a non-finite loss
// poisons the norm through AdamW::guard_losses' arithmetic, and DivergenceGuard's decisions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/run/divergence_guard.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

TEST(DivergenceGuardCpu, NonFiniteNormSkipsTheUpdateAndCounts) {
  HostTensor p = test::random_f32({64}, 1), g = test::random_f32({64}, 2), m = test::random_f32({64}, 3),
             v = test::random_f32({64}, 4, 0.01f, 1.f);
  const std::vector<double> p0 = p.to_double(), m0 = m.to_double(), v0 = v.to_double();
  HostTensor sumsq = test::f32({1}), scale = test::f32({2});
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    sumsq[0] = bad;
    scale[0] = 0.5f, scale[1] = 4.f;
    grad_clip_scale(sumsq, scale, 1.f);
    EXPECT_TRUE(std::isnan(scale[0])) << scale[0];
    EXPECT_EQ(scale[1], 5.f) << "the skipped step is counted";
    AdamWArgs a;
    a.lr = 0.1f, a.weight_decay = 0.1f, a.step = 2;
    HostTensor low = test::f32({64});
    test::poison(low);
    adamw(p, g, m, v, a, low, scale.t.slice(0, 1));
    for (int64_t i = 0; i < 64; ++i) {
      ASSERT_EQ(p[i], p0[size_t(i)]) << i;
      ASSERT_EQ(m[i], m0[size_t(i)]) << i;
      ASSERT_EQ(v[i], v0[size_t(i)]) << i;
      ASSERT_TRUE(std::isnan(low[i])) << "param_lowp must stay untouched (poisoned)";
    }
  }
  // Finite: the usual factor, not counted; the update happens.
  sumsq[0] = 16.f;
  scale[0] = 0.f, scale[1] = 5.f;
  grad_clip_scale(sumsq, scale, 1.f);
  EXPECT_NEAR(scale[0], 0.25f, 1e-6);
  EXPECT_EQ(scale[1], 5.f);
  AdamWArgs a;
  a.lr = 0.1f, a.step = 2;
  adamw(p, g, m, v, a, Tensor{}, scale.t.slice(0, 1));
  EXPECT_NE(p[0], p0[0]);
}

TEST(DivergenceGuardCpu, ZeroTimesTheLossSquaresIsZeroOrNaN) {
  // AdamW::guard_losses adds 0 * sum(loss^2) to a gradient: exactly 0 for finite losses, NaN for inf or NaN
  // (and for a loss whose square overflows f32, 1e30: a diverged loss as well).
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1e30f, 1e3f}) {
    HostTensor losses = test::random_f32({8}, 7, 0.5f, 3.f), check = test::f32({1});
    losses[5] = bad;
    check[0] = 0.f;
    sum_squares_accumulate(losses, check);
    scale_inplace(check, 0.f);
    if (bad == 1e3f) EXPECT_EQ(check[0], 0.f);
    else EXPECT_TRUE(std::isnan(check[0])) << bad << " gave " << check[0];
  }
}

TrainConfig train_with(const std::string& mode, double factor) {
  TrainConfig t;
  t.on_divergence = mode;
  t.divergence_factor = factor;
  return t;
}

TEST(DivergenceGuard, StopsOnSkippedStepsAndNamesTheStepsAndTheFix) {
  DivergenceGuard g(train_with("stop", 0), OptimConfig{});
  EXPECT_FALSE(g.check(10, 0, 2.5, 1.0).stop);
  const GuardVerdict v = g.check(20, 3, NAN, INFINITY);
  EXPECT_TRUE(v.stop);
  EXPECT_NE(v.message.find("divergence in 3 of steps 11..20"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("grad norm inf"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("Try a lower optim.lr"), std::string::npos) << v.message;
  DivergenceGuard one(train_with("stop", 0), OptimConfig{});
  EXPECT_NE(one.check(1, 1, NAN, NAN).message.find("divergence at step 1:"), std::string::npos);
}

TEST(DivergenceGuard, SkipStepGoesOnAndCounts) {
  DivergenceGuard g(train_with("skip_step", 0), OptimConfig{});
  GuardVerdict v = g.check(5, 2, 3.0, NAN);
  EXPECT_FALSE(v.stop);
  EXPECT_NE(v.message.find("2 skipped so far"), std::string::npos) << v.message;
  v = g.check(10, 2, 3.0, 1.0);  // no new skip
  EXPECT_FALSE(v.stop);
  EXPECT_TRUE(v.message.empty()) << v.message;
  v = g.check(15, 5, 3.0, NAN);
  EXPECT_NE(v.message.find("5 skipped so far"), std::string::npos) << v.message;
  EXPECT_EQ(g.skipped(), 5);
}

TEST(DivergenceGuard, FactorFlagsALossAboveItsRunningMean) {
  DivergenceGuard g(train_with("stop", 3), OptimConfig{});
  for (int s = 1; s <= 20; ++s) ASSERT_FALSE(g.check(s, 0, 2.0 + 0.01 * (s % 3), 1.0).stop) << s;
  EXPECT_NEAR(g.running_mean(), 2.01, 0.02);
  EXPECT_FALSE(g.check(21, 0, 5.9, 1.0).stop);  // below 3x
  const GuardVerdict v = g.check(22, 0, 1e4, 1.0);
  EXPECT_TRUE(v.stop);
  EXPECT_NE(v.message.find("exceeds train.divergence_factor 3"), std::string::npos) << v.message;
  // Off (factor 0): the same spike is not a divergence.
  DivergenceGuard off(train_with("stop", 0), OptimConfig{});
  off.check(1, 0, 2.0, 1.0);
  EXPECT_FALSE(off.check(2, 0, 1e4, 1.0).stop);
}

}  // namespace
}  // namespace rt
