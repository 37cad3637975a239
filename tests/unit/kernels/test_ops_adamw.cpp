// CPU AdamW: one step against hand-computed values, and several steps against an fp64 transcription
// of the update (decoupled weight decay, 1-based bias correction). param_lowp receives the new weights.
#include <gtest/gtest.h>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

TEST(AdamwCpu, OneStepByHand) {
  // p = 1, g = 0.5, m = v = 0, lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, step 1:
  //   m = 0.05, v = 0.00025, m_hat = 0.5, v_hat = 0.25, adam = 0.5 / (0.5 + 1e-8) = 0.99999998
  //   p = 1 - 0.1 * 0.01 * 1 - 0.1 * 0.99999998 = 0.899000002
  HostTensor p = test::f32({2}), g = test::f32({2}), m = test::f32({2}), v = test::f32({2});
  p[0] = 1.f;
  g[0] = 0.5f;
  p[1] = -2.f;  // second element: g = -1, p = -2
  g[1] = -1.f;  //   m = -0.1, v = 0.001, m_hat = -1, v_hat = 1, adam = -1/(1+1e-8)
                //   p = -2 - 0.1*0.01*(-2) - 0.1*(-0.99999999) = -1.898
  AdamWArgs a;
  a.lr = 0.1f;
  a.beta1 = 0.9f;
  a.beta2 = 0.999f;
  a.eps = 1e-8f;
  a.weight_decay = 0.01f;
  a.step = 1;
  HostTensor low = test::f32({2});
  test::poison(low);
  adamw(p, g, m, v, a, low);
  EXPECT_NEAR(p[0], 0.899000002, 1e-6);
  EXPECT_NEAR(p[1], -1.898, 1e-6);
  // 1 - 0.999f is 0.00099998713 in f32, so v is only as exact as the f32 constants allow.
  EXPECT_NEAR(m[0], 0.05, 0.05 * 1e-6);
  EXPECT_NEAR(v[0], 0.00025, 0.00025 * 2e-5);
  EXPECT_EQ(low[0], p[0]);
  EXPECT_EQ(low[1], p[1]);
}

TEST(AdamwCpu, SeveralStepsMatchFp64) {
  const int64_t n = 257;
  HostTensor p = test::random_f32({n}, 1), m = test::f32({n}), v = test::f32({n});
  std::vector<double> pd = p.to_double(), md(size_t(n), 0.0), vd(size_t(n), 0.0);
  AdamWArgs a;
  a.lr = 3e-3f;
  a.weight_decay = 0.1f;
  for (int64_t step = 1; step <= 4; ++step) {
    HostTensor g = test::random_f32({n}, 100 + uint64_t(step));
    a.step = step;
    adamw(p, g, m, v, a, Tensor{});
    const double b1 = a.beta1, b2 = a.beta2;
    for (int64_t k = 0; k < n; ++k) {
      const double gk = g[k];
      md[size_t(k)] = b1 * md[size_t(k)] + (1 - b1) * gk;
      vd[size_t(k)] = b2 * vd[size_t(k)] + (1 - b2) * gk * gk;
      const double mh = md[size_t(k)] / (1 - std::pow(b1, double(step)));
      const double vh = vd[size_t(k)] / (1 - std::pow(b2, double(step)));
      pd[size_t(k)] -= double(a.lr) * (double(a.weight_decay) * pd[size_t(k)] + mh / (std::sqrt(vh) + double(a.eps)));
    }
  }
  EXPECT_LT(test::rel_err(p, pd), 1e-6);
  EXPECT_LT(test::rel_err(m, md), 1e-6);
  EXPECT_LT(test::rel_err(v, vd), 1e-6);
}

TEST(AdamwCpu, RefusesMismatchedStateAndStepZero) {
  HostTensor p = test::f32({4}), g = test::f32({4}), m = test::f32({3}), v = test::f32({4});
  AdamWArgs a;
  EXPECT_THROW(adamw(p, g, m, v, a, Tensor{}), Error);
  a.step = 0;
  EXPECT_THROW(adamw(p, g, v, v, a, Tensor{}), Error);
}

}  // namespace
}  // namespace rt
