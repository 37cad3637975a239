// CPU fused ops (add_rmsnorm_fwd, linear_gelu_fwd, linear_dgelu): against an fp64 reference, and bit for bit
// against the unfused calls they replace (the model's CPU path must not change by a bit).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

double gelu64(double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }
double dgelu64(double v) {
  const double k = 0.7978845608028654, t = std::tanh(k * (v + 0.044715 * v * v * v));
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v);
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f(), b.f(), size_t(a.numel()) * sizeof(float)) == 0;
}

HostTensor copy_of(const HostTensor& h) {
  HostTensor c = test::f32(std::vector<int64_t>(h.t.shape.begin(), h.t.shape.begin() + h.t.ndim));
  std::memcpy(c.f(), h.f(), size_t(h.numel()) * sizeof(float));
  return c;
}

TEST(FusedCpu, AddRmsnormMatchesFp64AndTheUnfusedCallsBitForBit) {
  const int64_t N = 29, C = 200;
  const float eps = 1e-5f;
  HostTensor res = test::random_f32({N, C}, 1, -2.f, 2.f), x = test::random_f32({N, C}, 2, -2.f, 2.f);
  HostTensor w = test::random_f32({C}, 3, 0.5f, 1.5f);
  HostTensor res2 = copy_of(res);
  const auto r0 = res.to_double(), x0 = x.to_double(), wd = w.to_double();
  HostTensor out = test::f32({N, C}), rstd = test::f32({N}), out2 = test::f32({N, C}), rstd2 = test::f32({N});
  test::poison(out), test::poison(rstd), test::poison(out2), test::poison(rstd2);
  add_rmsnorm_fwd(res, x, out, rstd, w, eps);
  add_inplace(res2, x);
  rmsnorm_fwd(out2, rstd2, res2, w, eps);
  EXPECT_TRUE(same_bits(res, res2));
  EXPECT_TRUE(same_bits(out, out2));
  EXPECT_TRUE(same_bits(rstd, rstd2));
  std::vector<double> sum(static_cast<size_t>(N * C)), ref(sum.size()), rref(static_cast<size_t>(N));
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = r0[i] + x0[i];
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += sum[size_t(n * C + c)] * sum[size_t(n * C + c)];
    rref[size_t(n)] = 1.0 / std::sqrt(ss / double(C) + eps);
    for (int64_t c = 0; c < C; ++c) ref[size_t(n * C + c)] = sum[size_t(n * C + c)] * rref[size_t(n)] * wd[size_t(c)];
  }
  EXPECT_LT(test::rel_err(res, sum), 1e-6);
  EXPECT_LT(test::rel_err(out, ref), 1e-6);
  EXPECT_LT(test::rel_err(rstd, rref), 1e-6);
  EXPECT_FALSE(test::any_nan(out));
}

TEST(FusedCpu, LinearGeluForwardMatchesFp64AndTheUnfusedCallsBitForBit) {
  const int64_t m = 23, C = 40, F = 72;
  HostTensor x = test::random_f32({m, C}, 11), w = test::random_f32({F, C}, 12, -0.3f, 0.3f);
  HostTensor out = test::f32({m, F}), pre = test::f32({m, F}), out2 = test::f32({m, F}), pre2 = test::f32({m, F});
  test::poison(out), test::poison(pre), test::poison(out2), test::poison(pre2);
  linear_gelu_fwd(out, pre, x, w);
  gemm(pre2, x, w, false, true);
  gelu_fwd(out2, pre2);
  EXPECT_TRUE(same_bits(pre, pre2));
  EXPECT_TRUE(same_bits(out, out2));
  const auto xd = x.to_double(), wd = w.to_double();
  std::vector<double> pref(static_cast<size_t>(m * F)), oref(pref.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t f = 0; f < F; ++f) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += xd[size_t(i * C + c)] * wd[size_t(f * C + c)];
      pref[size_t(i * F + f)] = acc, oref[size_t(i * F + f)] = gelu64(acc);
    }
  EXPECT_LT(test::rel_err(pre, pref), 1e-5);
  EXPECT_LT(test::rel_err(out, oref), 1e-5);
  EXPECT_FALSE(test::any_nan(out));
}

TEST(FusedCpu, LinearDgeluMatchesFp64AndTheUnfusedCallsBitForBit) {
  const int64_t m = 23, C = 40, F = 72;
  HostTensor dout = test::random_f32({m, C}, 21), w = test::random_f32({C, F}, 22, -0.3f, 0.3f);
  HostTensor pre = test::random_f32({m, F}, 23, -3.f, 3.f);
  HostTensor dpre = test::f32({m, F}), dg = test::f32({m, F}), dpre2 = test::f32({m, F});
  test::poison(dpre), test::poison(dg), test::poison(dpre2);
  linear_dgelu(dpre, dout, w, pre);
  gemm(dg, dout, w, false, false);
  gelu_bwd(dpre2, dg, pre);
  EXPECT_TRUE(same_bits(dpre, dpre2));
  const auto gd = dout.to_double(), wd = w.to_double(), pd = pre.to_double();
  std::vector<double> ref(static_cast<size_t>(m * F));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t f = 0; f < F; ++f) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += gd[size_t(i * C + c)] * wd[size_t(c * F + f)];
      ref[size_t(i * F + f)] = acc * dgelu64(pd[size_t(i * F + f)]);
    }
  EXPECT_LT(test::rel_err(dpre, ref), 1e-5);
  EXPECT_FALSE(test::any_nan(dpre));
}

TEST(FusedCpu, RefuseAliasingAndMismatchedShapes) {
  HostTensor dout = test::random_f32({4, 8}, 1), w = test::random_f32({8, 16}, 2), pre = test::random_f32({4, 16}, 3);
  EXPECT_THROW(linear_dgelu(pre, dout, w, pre), Error);  // dpre aliasing pre
  HostTensor res = test::random_f32({4, 8}, 4), x = test::random_f32({4, 7}, 5), wn = test::random_f32({8}, 6);
  HostTensor out = test::f32({4, 8}), rstd = test::f32({4});
  EXPECT_THROW(add_rmsnorm_fwd(res, x, out, rstd, wn, 1e-5f), Error);
}

}  // namespace
}  // namespace rt
