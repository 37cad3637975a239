// CPU gemm against an fp64 triple loop: every transpose combination, sizes that cross the packing
// blocks (M > 96, N > 512, K > 256) and are not multiples of the 6x16 micro-tile, alpha and beta.
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/cpu/cpu_util.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

// c_ref = alpha * op(a) op(b) + beta * c0 in fp64.
std::vector<double> gemm_ref(const HostTensor& a, const HostTensor& b, const std::vector<double>& c0, int64_t M,
                             int64_t N, int64_t K, bool ta, bool tb, double alpha, double beta) {
  std::vector<double> c(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = ta ? a[k * M + i] : a[i * K + k];
        const double bv = tb ? b[j * K + k] : b[k * N + j];
        s += av * bv;
      }
      c[size_t(i * N + j)] = alpha * s + (beta == 0 ? 0.0 : beta * c0[size_t(i * N + j)]);
    }
  return c;
}

struct GemmCase {
  int64_t M, N, K;
  float alpha, beta;
};

class GemmCpu : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmCpu, MatchesFp64ForEveryTranspose) {
  const GemmCase g = GetParam();
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    SCOPED_TRACE("trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
    HostTensor a = test::random_f32(ta ? std::vector<int64_t>{g.K, g.M} : std::vector<int64_t>{g.M, g.K}, 10 + t);
    HostTensor b = test::random_f32(tb ? std::vector<int64_t>{g.N, g.K} : std::vector<int64_t>{g.K, g.N}, 20 + t);
    HostTensor c = test::random_f32({g.M, g.N}, 30 + t);
    std::vector<double> c0 = c.to_double();
    if (g.beta == 0.f) test::poison(c);  // beta = 0 must overwrite, never read c
    gemm(c, a, b, ta, tb, g.alpha, g.beta);
    const std::vector<double> ref = gemm_ref(a, b, c0, g.M, g.N, g.K, ta, tb, g.alpha, g.beta);
    ASSERT_FALSE(test::any_nan(c));
    EXPECT_LT(test::rel_err(c, ref), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GemmCpu,
                         ::testing::Values(GemmCase{1, 1, 1, 1.f, 0.f}, GemmCase{7, 5, 3, 1.f, 0.f},
                                           GemmCase{37, 53, 300, 0.5f, 0.f}, GemmCase{101, 530, 70, 1.f, 1.f},
                                           GemmCase{13, 17, 520, -2.f, 0.25f}, GemmCase{200, 33, 9, 1.f, -1.f}));

// The baseline x86-64 build (chosen on CPUs without AVX2) gives the same answers.
TEST(GemmCpuBaselineSimd, MatchesFp64) {
  cpu::force_baseline_simd(true);
  const int64_t M = 45, N = 70, K = 290;
  HostTensor a = test::random_f32({K, M}, 1), b = test::random_f32({K, N}, 2), c = test::random_f32({M, N}, 3);
  const std::vector<double> c0 = c.to_double();
  gemm(c, a, b, true, false, 0.75f, 0.5f);
  cpu::force_baseline_simd(false);
  EXPECT_LT(test::rel_err(c, gemm_ref(a, b, c0, M, N, K, true, false, 0.75, 0.5)), 1e-5);
}

TEST(GemmCpuChecks, RefusesMismatchedShapesAndDtypes) {
  HostTensor a = test::random_f32({4, 5}, 1), b = test::random_f32({6, 3}, 2), c = test::f32({4, 3});
  EXPECT_THROW(gemm(c, a, b, false, false), Error);  // K 5 vs 6
  HostTensor bi = HostTensor(DType::i32, {5, 3});
  EXPECT_THROW(gemm(c, a, bi, false, false), Error);
  HostTensor a3 = test::random_f32({1, 4, 5}, 3), b2 = test::random_f32({5, 3}, 4);
  EXPECT_THROW(gemm(c, a3, b2, false, false), Error);
  EXPECT_NO_THROW(gemm(c, a, b2, false, false));
}

TEST(GemmCpuChecks, ZeroDepthScalesByBeta) {
  HostTensor a = test::f32({3, 0}), b = test::f32({0, 4}), c = test::random_f32({3, 4}, 5);
  std::vector<double> c0 = c.to_double();
  gemm(c, a, b, false, false, 1.f, 0.5f);
  for (int64_t k = 0; k < c.numel(); ++k) EXPECT_FLOAT_EQ(c[k], float(0.5 * c0[size_t(k)]));
}

}  // namespace
}  // namespace rt
