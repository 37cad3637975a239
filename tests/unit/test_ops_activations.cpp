// CPU GELU (tanh approximation) and SwiGLU: forward against fp64, backward against fp64 central differences.
#include <gtest/gtest.h>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

std::vector<double> gelu_ref(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  const double k = std::sqrt(2.0 / M_PI);
  for (size_t e = 0; e < x.size(); ++e) y[e] = 0.5 * x[e] * (1 + std::tanh(k * (x[e] + 0.044715 * x[e] * x[e] * x[e])));
  return y;
}

std::vector<double> swiglu_ref(const std::vector<double>& g, const std::vector<double>& u) {
  std::vector<double> y(g.size());
  for (size_t e = 0; e < g.size(); ++e) y[e] = g[e] / (1 + std::exp(-g[e])) * u[e];
  return y;
}

TEST(GeluCpu, ForwardAndBackward) {
  const int64_t N = 6, F = 40;
  HostTensor x = test::random_f32({N, F}, 1, -5.f, 5.f), out = test::f32({N, F});
  test::poison(out);
  gelu_fwd(out, x);
  EXPECT_LT(test::rel_err(out, gelu_ref(x.to_double())), 1e-6);

  HostTensor dout = test::random_f32({N, F}, 2), dx = test::f32({N, F});
  test::poison(dx);
  gelu_bwd(dx, dout, x);
  const auto fd = test::fd_grad(gelu_ref, x.to_double(), dout.to_double());
  EXPECT_LT(test::rel_err(dx, fd), 1e-5);
}

TEST(SwigluCpu, ForwardAndBackward) {
  const int64_t N = 5, F = 36;
  HostTensor g = test::random_f32({N, F}, 3, -6.f, 6.f), u = test::random_f32({N, F}, 4, -2.f, 2.f);
  HostTensor out = test::f32({N, F});
  test::poison(out);
  swiglu_fwd(out, g, u);
  const auto gd = g.to_double(), ud = u.to_double();
  EXPECT_LT(test::rel_err(out, swiglu_ref(gd, ud)), 1e-6);

  HostTensor dout = test::random_f32({N, F}, 5), dg = test::f32({N, F}), du = test::f32({N, F});
  test::poison(dg);
  test::poison(du);
  swiglu_bwd(dg, du, dout, g, u);
  const auto fd_g = test::fd_grad([&](const std::vector<double>& gg) { return swiglu_ref(gg, ud); }, gd, dout.to_double());
  const auto fd_u = test::fd_grad([&](const std::vector<double>& uu) { return swiglu_ref(gd, uu); }, ud, dout.to_double());
  EXPECT_LT(test::rel_err(dg, fd_g), 1e-5);
  EXPECT_LT(test::rel_err(du, fd_u), 1e-5);
}

TEST(ActivationsCpu, RefuseMismatchedShapes) {
  HostTensor x = test::random_f32({4, 8}, 1), out = test::f32({4, 7});
  EXPECT_THROW(gelu_fwd(out, x), Error);
  EXPECT_THROW(swiglu_fwd(x, x, out), Error);
}

}  // namespace
}  // namespace rt
