// The RoPE table (kernels/rope_table.h) and rope_from_table on the CPU: the table against fp64 cos / sin, the
// rotation against an fp64 rotation and against the rope op (per-element fp64 angles), and inverse = transpose.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/rope_table.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

std::vector<double> plain_inv_freq(double base, int64_t D) {
  std::vector<double> f(static_cast<size_t>(D / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::pow(base, -2.0 * double(i) / double(D));
  return f;
}

HostTensor table_tensor(const std::vector<float>& table, int64_t T, int64_t half) {
  HostTensor t = test::f32({T, half, 2});
  for (int64_t k = 0; k < t.numel(); ++k) t[k] = table[size_t(k)];
  return t;
}

TEST(RopeTable, EntriesAreFp64CosSinRoundedToFp32) {
  const int64_t T = 50, D = 64;
  const std::vector<double> inv = plain_inv_freq(500000.0, D);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(1000003 * (t % 7) + 13 * t);  // up to ~6M
  std::vector<float> table;
  build_rope_table(table, pos.data(), T, inv.data(), int32_t(D / 2), 0.75);
  ASSERT_EQ(table.size(), size_t(T * D));
  double worst = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = double(pos[size_t(t)]) * inv[size_t(i)];
      const size_t k = size_t((t * (D / 2) + i) * 2);
      worst = std::max({worst, std::fabs(table[k] - 0.75 * std::cos(a)), std::fabs(table[k + 1] - 0.75 * std::sin(a))});
    }
  EXPECT_LT(worst, 6e-8);  // half an fp32 ulp at 0.75 is 3e-8; the fp64 angle itself is exact to ~1e-9 here
  EXPECT_EQ(rope_table_bytes(T, D), T * D * 4);
}

TEST(RopeFromTableCpu, MatchesFp64RotationAndTheRopeOp) {
  const int64_t B = 2, T = 24, H = 3, D = 32, half = D / 2;
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(70000 + 3 * t);
  const std::vector<double> inv = plain_inv_freq(10000.0, D);
  std::vector<float> table;
  build_rope_table(table, pos.data(), T, inv.data(), int32_t(half), 1.0);
  HostTensor tab = table_tensor(table, T, half);
  HostTensor x = test::random_f32({B, T, H, D}, 31, -2.f, 2.f), y = test::random_f32({B, T, H, D}, 31, -2.f, 2.f);
  HostTensor p = test::i32({T});
  for (int64_t t = 0; t < T; ++t) p.t.ptr<int32_t>()[t] = pos[size_t(t)];
  const std::vector<double> x0 = x.to_double();
  rope_from_table(x, tab, false);
  rope(y, p, RopeFreqs::plain(10000.0, D), false);
  std::vector<double> ref(x0.size());
  for (int64_t r = 0; r < B * T * H; ++r) {
    const int64_t t = (r / H) % T;
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(pos[size_t(t)]) * inv[size_t(i)];
      const double x1 = x0[size_t(r * D + i)], x2 = x0[size_t(r * D + i + half)];
      ref[size_t(r * D + i)] = x1 * std::cos(a) - x2 * std::sin(a);
      ref[size_t(r * D + i + half)] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  }
  EXPECT_LT(test::rel_err(x, ref), 1e-6);
  EXPECT_LT(test::rel_err(x, y.to_double()), 1e-6);
  EXPECT_FALSE(test::any_nan(x));
  rope_from_table(x, tab, true);  // the inverse undoes it
  EXPECT_LT(test::rel_err(x, x0), 1e-6);
}

TEST(RopeFromTableCpu, RefusesATableOfTheWrongShape) {
  HostTensor x = test::random_f32({1, 8, 2, 16}, 1), tab = test::random_f32({8, 7, 2}, 2);
  EXPECT_THROW(rope_from_table(x, tab, false), Error);
  std::vector<float> table;
  EXPECT_THROW(build_rope_table(table, nullptr, 4, nullptr, 0, 1.0), Error);
}

}  // namespace
}  // namespace rt
