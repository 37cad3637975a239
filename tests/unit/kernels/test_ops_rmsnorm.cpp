// CPU rmsnorm: forward against fp64, backward (dx and dweight accumulate) against fp64 central differences.
#include <gtest/gtest.h>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

// out (N,C) = x * rsqrt(mean(x^2) + eps) * w in fp64.
std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t N, int64_t C,
                                double eps, std::vector<double>* rstd = nullptr) {
  std::vector<double> out(x.size());
  if (rstd) rstd->resize(size_t(N));
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[size_t(n * C + c)] * x[size_t(n * C + c)];
    const double r = 1.0 / std::sqrt(ss / double(C) + eps);
    if (rstd) (*rstd)[size_t(n)] = r;
    for (int64_t c = 0; c < C; ++c) out[size_t(n * C + c)] = x[size_t(n * C + c)] * r * w[size_t(c)];
  }
  return out;
}

TEST(RmsnormCpu, ForwardMatchesFp64) {
  const int64_t N = 37, C = 300;
  const float eps = 1e-5f;
  HostTensor x = test::random_f32({N, C}, 1, -3.f, 3.f), w = test::random_f32({C}, 2, 0.5f, 1.5f);
  HostTensor out = test::f32({N, C}), rstd = test::f32({N});
  test::poison(out);
  test::poison(rstd);
  rmsnorm_fwd(out, rstd, x, w, eps);
  std::vector<double> rstd_ref;
  const auto ref = rmsnorm_ref(x.to_double(), w.to_double(), N, C, eps, &rstd_ref);
  EXPECT_LT(test::rel_err(out, ref), 1e-6);
  EXPECT_LT(test::rel_err(rstd, rstd_ref), 1e-6);
}

TEST(RmsnormCpu, BackwardAccumulatesFiniteDifferenceGradients) {
  const int64_t N = 5, C = 24;
  const float eps = 1e-5f;
  HostTensor x = test::random_f32({N, C}, 3, -2.f, 2.f), w = test::random_f32({C}, 4, 0.5f, 1.5f);
  HostTensor dout = test::random_f32({N, C}, 5);
  HostTensor out = test::f32({N, C}), rstd = test::f32({N});
  rmsnorm_fwd(out, rstd, x, w, eps);
  HostTensor dx = test::random_f32({N, C}, 6), dw = test::random_f32({C}, 7);
  const auto dx0 = dx.to_double(), dw0 = dw.to_double();
  rmsnorm_bwd(dx, dw, dout, x, w, rstd);

  const auto xd = x.to_double(), wd = w.to_double(), gd = dout.to_double();
  const auto fd_x = test::fd_grad([&](const std::vector<double>& xx) { return rmsnorm_ref(xx, wd, N, C, eps); }, xd, gd);
  const auto fd_w = test::fd_grad([&](const std::vector<double>& ww) { return rmsnorm_ref(xd, ww, N, C, eps); }, wd, gd);
  EXPECT_LT(test::rel_err(test::minus(dx, dx0), fd_x), 1e-5);
  EXPECT_LT(test::rel_err(test::minus(dw, dw0), fd_w), 1e-5);
}

TEST(RmsnormCpu, RefusesMismatchedShapes) {
  HostTensor x = test::random_f32({4, 8}, 1), w = test::random_f32({7}, 2), out = test::f32({4, 8}),
             rstd = test::f32({4});
  EXPECT_THROW(rmsnorm_fwd(out, rstd, x, w, 1e-5f), Error);
}

}  // namespace
}  // namespace rt
