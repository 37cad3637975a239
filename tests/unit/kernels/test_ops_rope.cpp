// CPU rope: forward against fp64 (including positions past 10^5), backward = inverse rotation checked
// against fp64 central differences, and forward then inverse returns the input.
#include <gtest/gtest.h>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

// x (B,T,H,D) rotated: pairs (i, i+D/2), angle pos[t] * base^(-2i/D).
std::vector<double> rope_ref(const std::vector<double>& x, const std::vector<int32_t>& pos, int64_t B, int64_t T,
                             int64_t H, int64_t D, double base) {
  std::vector<double> y(x.size());
  const int64_t half = D / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double a = double(pos[size_t(t)]) * std::pow(base, -2.0 * double(i) / double(D));
          const size_t o = size_t(((b * T + t) * H + h) * D);
          const double x1 = x[o + i], x2 = x[o + i + half];
          y[o + i] = x1 * std::cos(a) - x2 * std::sin(a);
          y[o + i + half] = x1 * std::sin(a) + x2 * std::cos(a);
        }
  return y;
}

struct RopeInputs {
  int64_t B = 2, T = 6, H = 3, D = 16;
  HostTensor x = test::random_f32({B, T, H, D}, 11);
  HostTensor pos = test::i32({T});
  std::vector<int32_t> posv{0, 1, 17, 4095, 131071, 262143};
  RopeInputs() {
    for (int64_t t = 0; t < T; ++t) pos.i()[t] = posv[size_t(t)];
  }
};

TEST(RopeCpu, ForwardMatchesFp64) {
  RopeInputs in;
  const auto ref = rope_ref(in.x.to_double(), in.posv, in.B, in.T, in.H, in.D, 10000.0);
  rope(in.x, in.pos, RopeFreqs::plain(10000.0, in.D), false);
  EXPECT_LT(test::rel_err(in.x, ref), 1e-6);
}

TEST(RopeCpu, InverseIsTheBackwardAndUndoesTheForward) {
  RopeInputs in;
  const auto x0 = in.x.to_double();
  HostTensor dout = test::random_f32({in.B, in.T, in.H, in.D}, 12);
  const auto fd = test::fd_grad(
      [&](const std::vector<double>& x) { return rope_ref(x, in.posv, in.B, in.T, in.H, in.D, 500000.0); }, x0,
      dout.to_double());
  rope(dout, in.pos, RopeFreqs::plain(500000.0, in.D), true);  // dx = R^T dout
  EXPECT_LT(test::rel_err(dout, fd), 1e-6);

  rope(in.x, in.pos, RopeFreqs::plain(500000.0, in.D), false);
  rope(in.x, in.pos, RopeFreqs::plain(500000.0, in.D), true);
  EXPECT_LT(test::rel_err(in.x, x0), 1e-6);
}

TEST(RopeCpu, RefusesOddHeadDimAndWrongPositions) {
  HostTensor x = test::random_f32({1, 2, 1, 5}, 1), pos = test::i32({2});
  EXPECT_THROW(rope(x, pos, RopeFreqs::plain(10000.0, 4), false), Error);
  HostTensor x2 = test::random_f32({1, 2, 1, 4}, 1), pos3 = test::i32({3});
  EXPECT_THROW(rope(x2, pos3, RopeFreqs::plain(10000.0, 4), false), Error);
  HostTensor pos2 = test::i32({2});
  EXPECT_THROW(rope(x2, pos2, RopeFreqs::plain(10000.0, 8), false), Error);  // frequencies for another D
}

}  // namespace
}  // namespace rt
