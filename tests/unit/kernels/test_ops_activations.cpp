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

// gu (N, 2F): per row the gate then the up values; returns (N, F) silu(gate) * up in fp64.
std::vector<double> swiglu_ref(const std::vector<double>& gu, int64_t N, int64_t F) {
  std::vector<double> y(size_t(N * F));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < F; ++c) {
      const double g = gu[size_t(r * 2 * F + c)], u = gu[size_t(r * 2 * F + F + c)];
      y[size_t(r * F + c)] = g / (1 + std::exp(-g)) * u;
    }
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

// The fused gate|up layout: gate_up (N, 2F) holds the gate in columns [0, F) and up in [F, 2F) of each row. The
// gate columns span [-6, 6], the up columns [-2, 2] (so a swapped half shows). The backward writes d gate | d up in
// the same layout and is checked against central differences of the fp64 forward over all 2F columns.
TEST(SwigluCpu, ForwardAndBackwardOnGateUpRows) {
  const int64_t N = 5, F = 36;
  HostTensor gu = test::f32({N, 2 * F});
  {
    HostTensor g = test::random_f32({N, F}, 3, -6.f, 6.f), u = test::random_f32({N, F}, 4, -2.f, 2.f);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < F; ++c) {
        gu.f()[r * 2 * F + c] = g.f()[r * F + c];
        gu.f()[r * 2 * F + F + c] = u.f()[r * F + c];
      }
  }
  HostTensor out = test::f32({N, F});
  test::poison(out);
  swiglu_fwd(out, gu);
  const auto gud = gu.to_double();
  EXPECT_LT(test::rel_err(out, swiglu_ref(gud, N, F)), 1e-6);

  HostTensor dout = test::random_f32({N, F}, 5), dgu = test::f32({N, 2 * F});
  test::poison(dgu);
  swiglu_bwd(dgu, dout, gu);
  EXPECT_FALSE(test::any_nan(dgu));
  const auto fd = test::fd_grad([&](const std::vector<double>& x) { return swiglu_ref(x, N, F); }, gud,
                                dout.to_double());
  EXPECT_LT(test::rel_err(dgu, fd), 1e-5);
}

TEST(ActivationsCpu, RefuseMismatchedShapes) {
  HostTensor x = test::random_f32({4, 8}, 1), out = test::f32({4, 7});
  EXPECT_THROW(gelu_fwd(out, x), Error);
  EXPECT_THROW(swiglu_fwd(out, x), Error);  // gate_up must be (N, 2F) for out (N, F): 8 != 2 x 7
  HostTensor gu = test::random_f32({3, 16}, 2), half = test::f32({4, 8});
  EXPECT_THROW(swiglu_fwd(half, gu), Error);  // rows differ
  HostTensor dgu = test::f32({3, 14});
  EXPECT_THROW(swiglu_bwd(dgu, test::random_f32({3, 8}, 3), gu), Error);  // d_gate_up not gate_up's shape
}

}  // namespace
}  // namespace rt
