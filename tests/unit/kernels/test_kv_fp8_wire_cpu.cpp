// kv_fp8_quantize / kv_fp8_dequantize on the CPU (kernels/kv_fp8_wire.h: K or V (B, n, Hkv, D) in E4M3, a factor per
// sample, 128-row block and K/V head) against references written here in fp64: the group amax, the factor
// 1 / (448 / amax), every code's value from its bits. On N(0,1) the round trip's relative RMS error is E4M3's ~2-4e-2
// (3 mantissa bits); values already on a group's E4M3 grid (a power-of-two factor) come back exactly; a NaN spoils its
// own group only; a zero group has factor 1; the last row block may be partial.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/kv_fp8_wire.h"

namespace rt {
namespace {

// The value of an E4M3 code from its bits (sign, 4 exponent bits with bias 7, 3 mantissa bits; subnormals at
// exponent 0); NaN for 0x7F / 0xFF.
double ref_code_value(uint8_t b) {
  if ((b & 0x7F) == 0x7F) return std::nan("");
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int exp = (b >> 3) & 0xF, man = b & 7;
  if (exp == 0) return sign * man * std::ldexp(1.0, -9);
  return sign * (1.0 + man / 8.0) * std::ldexp(1.0, exp - 7);
}

struct Shape {
  int64_t B, n, Hkv, D;
  int64_t numel() const { return B * n * Hkv * D; }
  int64_t blocks() const { return (n + 127) / 128; }
  int64_t index(int64_t b, int64_t t, int64_t hk, int64_t e) const { return ((b * n + t) * Hkv + hk) * D + e; }
};

struct RoundTrip {
  std::vector<uint8_t> codes;  // (B, n, Hkv, D)
  std::vector<float> factors;  // (B, Hkv, nb)
  std::vector<float> back;     // (B, n, Hkv, D) dequantized
};

RoundTrip round_trip(const Shape& s, std::vector<float> x) {
  RoundTrip r;
  r.codes.assign(size_t(s.numel()), 0x55);                  // poisoned
  r.factors.assign(size_t(s.B * s.Hkv * s.blocks()), -7.f);  // poisoned
  r.back.assign(size_t(s.numel()), std::nanf(""));           // poisoned
  const Device cpu = Device::cpu();
  kv_fp8_quantize(Tensor(r.codes.data(), DType::e4m3, cpu, {s.B, s.n, s.Hkv, s.D}),
                  Tensor(r.factors.data(), DType::f32, cpu, {s.B, s.Hkv, s.blocks()}),
                  Tensor(x.data(), DType::f32, cpu, {s.B, s.n, s.Hkv, s.D}));
  kv_fp8_dequantize(Tensor(r.back.data(), DType::f32, cpu, {s.B, s.n, s.Hkv, s.D}),
                    Tensor(r.codes.data(), DType::e4m3, cpu, {s.B, s.n, s.Hkv, s.D}),
                    Tensor(r.factors.data(), DType::f32, cpu, {s.B, s.Hkv, s.blocks()}));
  return r;
}

std::vector<float> normal(const Shape& s, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(size_t(s.numel()));
  for (float& v : x) v = d(g);
  return x;
}

// n = 300: blocks of 128, 128 and 44 rows.
TEST(KvFp8Wire, RoundTripOnNormalValuesIsE4m3sRoundingPerGroup) {
  const Shape s{2, 300, 3, 64};
  const std::vector<float> x = normal(s, 4711);
  const RoundTrip r = round_trip(s, x);
  double diff2 = 0, ref2 = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t hk = 0; hk < s.Hkv; ++hk)
      for (int64_t rb = 0; rb < s.blocks(); ++rb) {
        const int64_t t0 = rb * 128, t1 = std::min(s.n, t0 + 128);
        double amax = 0;
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t e = 0; e < s.D; ++e) amax = std::max(amax, std::fabs(double(x[size_t(s.index(b, t, hk, e))])));
        const float factor = r.factors[size_t((b * s.Hkv + hk) * s.blocks() + rb)];
        const float want_factor = 1.f / (448.f / float(amax));  // kernels/fp8.h's f32 arithmetic
        ASSERT_EQ(factor, want_factor) << "group b " << b << " hk " << hk << " block " << rb;
        EXPECT_NEAR(double(factor), amax / 448.0, 1e-6 * amax / 448.0);
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t e = 0; e < s.D; ++e) {
            const size_t i = size_t(s.index(b, t, hk, e));
            const double scaled = double(x[i]) * (448.0 / amax);
            const double code_value = ref_code_value(r.codes[i]);
            // The code is a nearest E4M3 value of the scaled input: within half a step of 3 mantissa bits (subnormal
            // steps 2^-9 near zero).
            const double step = std::fabs(scaled) < 1.0 / 64 ? std::ldexp(1.0, -9)
                                                             : std::ldexp(1.0, int(std::floor(std::log2(std::fabs(scaled)))) - 3);
            EXPECT_LE(std::fabs(code_value - scaled), 0.5 * step * (1 + 1e-6) + 1e-9) << "element " << i;
            const double want = code_value * double(factor);
            ASSERT_FALSE(std::isnan(r.back[i])) << "element " << i;
            EXPECT_NEAR(double(r.back[i]), want, 1e-6 * std::fabs(want) + 1e-30) << "element " << i;
            diff2 += (double(r.back[i]) - double(x[i])) * (double(r.back[i]) - double(x[i]));
            ref2 += double(x[i]) * double(x[i]);
          }
      }
  const double rel = std::sqrt(diff2 / ref2);
  std::printf("[ kv fp8 wire ] N(0,1) round trip: relative RMS error %.3e\n", rel);
  EXPECT_GT(rel, 1e-2) << "not rounded to 3 mantissa bits";
  EXPECT_LT(rel, 4e-2) << "more than E4M3's rounding";
}

// Each group holds E4M3 values times 2^k with one element at 448 x 2^k: its amax is 448 x 2^k, its factor 2^k exactly,
// so every value comes back bit for bit.
TEST(KvFp8Wire, ValuesOnTheGridComeBackExactly) {
  const Shape s{1, 200, 2, 128};
  std::mt19937_64 g(17);
  std::uniform_int_distribution<int> code(0, 255);
  std::vector<float> x(size_t(s.numel()));
  for (int64_t hk = 0; hk < s.Hkv; ++hk)
    for (int64_t rb = 0; rb < s.blocks(); ++rb) {
      const int k = int(hk * 3 + rb) - 4;  // 2^-4 .. 2^1
      const int64_t t0 = rb * 128, t1 = std::min(s.n, t0 + 128);
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t e = 0; e < s.D; ++e) {
          int c = code(g);
          while ((c & 0x7F) == 0x7F) c = code(g);  // no NaN codes
          x[size_t(s.index(0, t, hk, e))] = float(std::ldexp(ref_code_value(uint8_t(c)), k));
        }
      x[size_t(s.index(0, t0 + 3, hk, 5))] = float(std::ldexp(-448.0, k));  // the group's amax
    }
  const RoundTrip r = round_trip(s, x);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(r.back[i], x[i]) << "element " << i;
  for (int64_t hk = 0; hk < s.Hkv; ++hk)
    for (int64_t rb = 0; rb < s.blocks(); ++rb)
      EXPECT_EQ(r.factors[size_t(hk * s.blocks() + rb)], std::ldexp(1.f, int(hk * 3 + rb) - 4));
}

// A NaN makes its group's factor NaN (how a caller detects a bad tensor) and leaves the other groups as they were; an
// all-zero group has factor 1 and zero codes.
TEST(KvFp8Wire, NanSpoilsItsGroupOnlyAndZeroGroupsStayZero) {
  const Shape s{2, 256, 2, 64};
  std::vector<float> x = normal(s, 99);
  x[size_t(s.index(1, 130, 0, 7))] = std::nanf("");     // group (b 1, hk 0, block 1)
  for (int64_t t = 0; t < 128; ++t)
    for (int64_t e = 0; e < s.D; ++e) x[size_t(s.index(0, t, 1, e))] = 0.f;  // group (b 0, hk 1, block 0)
  const RoundTrip clean = round_trip(s, normal(s, 99));
  const RoundTrip r = round_trip(s, x);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t hk = 0; hk < s.Hkv; ++hk)
      for (int64_t rb = 0; rb < s.blocks(); ++rb) {
        const float f = r.factors[size_t((b * s.Hkv + hk) * s.blocks() + rb)];
        if (b == 1 && hk == 0 && rb == 1) EXPECT_TRUE(std::isnan(f));
        else if (b == 0 && hk == 1 && rb == 0) EXPECT_EQ(f, 1.f);
        else EXPECT_EQ(f, clean.factors[size_t((b * s.Hkv + hk) * s.blocks() + rb)]);
      }
  EXPECT_EQ(r.codes[size_t(s.index(1, 130, 0, 7))], 0x7F) << "NaN's code";
  EXPECT_TRUE(std::isnan(r.back[size_t(s.index(1, 131, 0, 0))])) << "its group dequantizes to NaN";
  EXPECT_EQ(r.back[size_t(s.index(1, 131, 1, 0))], clean.back[size_t(s.index(1, 131, 1, 0))]) << "another head";
  for (int64_t t = 0; t < 128; ++t) EXPECT_EQ(r.codes[size_t(s.index(0, t, 1, 3))], 0) << "zero group's codes";
}

TEST(KvFp8Wire, RefusesMismatchedArguments) {
  std::vector<float> x(size_t(1 * 128 * 1 * 64)), f(2), out(x.size());
  std::vector<uint8_t> q(x.size());
  const Device cpu = Device::cpu();
  const Tensor tx(x.data(), DType::f32, cpu, {1, 128, 1, 64}), tq(q.data(), DType::e4m3, cpu, {1, 128, 1, 64});
  EXPECT_THROW(kv_fp8_quantize(tq, Tensor(f.data(), DType::f32, cpu, {1, 1, 2}), tx), std::exception)
      << "factors (B, Hkv, ceil(n/128)) = (1, 1, 1)";
  EXPECT_THROW(kv_fp8_quantize(Tensor(q.data(), DType::f32, cpu, {1, 128, 1, 16}), Tensor(f.data(), DType::f32, cpu,
                                                                                          {1, 1, 1}), tx),
               std::exception)
      << "codes must be e4m3";
  EXPECT_THROW(kv_fp8_dequantize(Tensor(out.data(), DType::f32, cpu, {128, 64}), tq,
                                 Tensor(f.data(), DType::f32, cpu, {1, 1, 1})),
               std::exception)
      << "out must be 4-d";
}

}  // namespace
}  // namespace rt
