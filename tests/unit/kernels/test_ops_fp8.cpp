// The FP8 ops on the CPU (kernels/fp8.h, kernels/cpu/fp8_*.cpp) against references written independently here:
// E4M3 rounding by a nearest-even search over all 254 finite codes; group amaxes by explicit loops over each
// scaling's groups; the GEMM in fp64 on the dequantized operands. Specials: 0 and -0, subnormals, the saturation
// bound, +-inf, NaN, constant and all-zero blocks, a tiny amax whose scale overflows, odd shapes and partial blocks.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ops.h"
#include "tests/unit/test_util.h"

namespace rt {
namespace {

// ---- the references ----

// Nearest E4M3 code to x by search: ties to the even code (the even mantissa), |x| >= 448 (inf too) to +-448,
// NaN to 0x7F, the sign kept (also on zero).
uint8_t ref_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(double(x));
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  double best_d = INFINITY;
  for (int code = 0; code <= 0x7E; ++code) {
    const int e = code >> 3, m = code & 7;
    const double v = e == 0 ? m * std::ldexp(1.0, -9) : (8 + m) * std::ldexp(1.0, e - 10);
    const double d = std::fabs(v - a);
    if (d < best_d || (d == best_d && (code & 1) == 0)) best = code, best_d = d;
  }
  return sign | uint8_t(best);
}

double code_value(uint8_t b) {
  if ((b & 0x7F) == 0x7F) return NAN;
  const int e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? m * std::ldexp(1.0, -9) : (8 + m) * std::ldexp(1.0, e - 10);
  return (b & 0x80) ? -v : v;
}

// The multiplier of a group of amax a (the definition of kernels/fp8.h, restated).
float ref_scale(double amax) {
  if (std::isnan(amax)) return NAN;
  if (amax == 0) return 1.f;
  const float s = 448.f / float(amax);
  return std::isinf(s) ? FLT_MAX : s;
}

// The amax of each group of an (R, K) operand element(r, k) under `scaling`, by explicit group loops.
template <class At>
std::vector<double> ref_group_amax(Fp8Scaling scaling, int64_t R, int64_t K, At at) {
  auto fold = [](double m, float v) { return std::isnan(m) || std::isnan(v) ? NAN : std::max(m, double(std::fabs(v))); };
  const Fp8ScaleShape ss = fp8_scale_shape(scaling, R, K);
  std::vector<double> out(size_t(ss.numel()), 0.0);
  switch (scaling) {
    case Fp8Scaling::tensor:
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k) out[0] = fold(out[0], at(r, k));
      break;
    case Fp8Scaling::row:
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k) out[size_t(r)] = fold(out[size_t(r)], at(r, k));
      break;
    case Fp8Scaling::block_1x128:  // (ceil(K/128), R)
      for (int64_t kb = 0; kb * 128 < K; ++kb)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t k = kb * 128; k < std::min(K, kb * 128 + 128); ++k)
            out[size_t(kb * R + r)] = fold(out[size_t(kb * R + r)], at(r, k));
      break;
    case Fp8Scaling::block_128x128: {  // (ceil(R/128), ld); padding columns stay 0 (factor 1)
      const int64_t ld = ss.d1;
      for (int64_t rb = 0; rb * 128 < R; ++rb)
        for (int64_t kb = 0; kb * 128 < K; ++kb)
          for (int64_t r = rb * 128; r < std::min(R, rb * 128 + 128); ++r)
            for (int64_t k = kb * 128; k < std::min(K, kb * 128 + 128); ++k)
              out[size_t(rb * ld + kb)] = fold(out[size_t(rb * ld + kb)], at(r, k));
      break;
    }
  }
  return out;
}

struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> factors;
};

template <class At>
Quantized ref_quantize(Fp8Scaling scaling, int64_t R, int64_t K, At at) {
  const std::vector<double> amax = ref_group_amax(scaling, R, K, at);
  Quantized q;
  std::vector<float> mult(amax.size());
  for (size_t i = 0; i < amax.size(); ++i) {
    mult[i] = ref_scale(amax[i]);
    q.factors.push_back(1.f / mult[i]);
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k)
      q.codes.push_back(ref_e4m3(at(r, k) * mult[size_t(fp8_scale_index(scaling, R, K, r, k))]));
  return q;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], 4) != 0) return false;
  return true;
}

std::string first_code_mismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (got[i] != want[i])
      return "code " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]);
  return got.size() == want.size() ? "none" : "sizes differ";
}

// ---- running the ops on host vectors ----

Tensor view(std::vector<float>& v, int64_t a, int64_t b = -1) {
  return b < 0 ? Tensor(v.data(), DType::f32, Device::cpu(), {a}) : Tensor(v.data(), DType::f32, Device::cpu(), {a, b});
}

struct HostOperand {
  std::vector<uint8_t> codes;
  std::vector<float> factors;
  Fp8Operand op;
  HostOperand(int64_t R, int64_t K, Fp8Scaling s) {
    const Fp8ScaleShape ss = fp8_scale_shape(s, R, K);
    codes.assign(size_t(R * K), 0xEE);                 // poison
    factors.assign(size_t(ss.numel()), std::nanf(""));  // poison
    op = Fp8Operand{Tensor(codes.data(), DType::e4m3, Device::cpu(), {R, K}),
                    ss.ndim == 1 ? view(factors, ss.d0) : view(factors, ss.d0, ss.d1), s};
  }
};

// Runs fp8_amax (where the scaling needs it) and fp8_quantize on x (R,K); q and / or qt.
void quantize(std::vector<float>& x, int64_t R, int64_t K, Fp8Scaling s, HostOperand* q, HostOperand* qt) {
  std::vector<float> amax, amax_t;
  Tensor ta, tt;
  if (s == Fp8Scaling::tensor) {
    amax.assign(1, NAN);
    ta = view(amax, 1);
    fp8_amax(ta, Tensor{}, view(x, R, K), s);
  } else if (s == Fp8Scaling::row) {
    amax.assign(size_t(R), NAN), amax_t.assign(size_t(K), NAN);
    ta = view(amax, R), tt = view(amax_t, K);
    fp8_amax(ta, tt, view(x, R, K), s);
  }
  fp8_quantize(q ? q->op : Fp8Operand{}, qt ? qt->op : Fp8Operand{}, view(x, R, K), ta, tt);
}

std::vector<float> random_values(int64_t n, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

const Fp8Scaling kScalings[] = {Fp8Scaling::tensor, Fp8Scaling::row, Fp8Scaling::block_1x128,
                                Fp8Scaling::block_128x128};

// ---- rounding ----

TEST(Fp8Rounding, MatchesTheNearestEvenSearch) {
  std::vector<float> xs = {0.f, -0.f, 1.f, -1.f, 448.f, -448.f, 449.f, 463.99f, 464.f, 480.f, 1e30f, -1e30f,
                           INFINITY, -INFINITY, FLT_MIN, -FLT_MIN, 1e-45f, -1e-45f, FLT_MAX,
                           std::ldexp(1.f, -9), std::ldexp(1.f, -10), std::ldexp(3.f, -10), std::ldexp(1.f, -11),
                           std::ldexp(15.f, -10), std::ldexp(1.f, -6), std::ldexp(31.f, -11)};
  // Every finite code's value, the midpoints between neighbours (ties) and one f32 step either side of them.
  for (int code = 0; code < 0x7E; ++code) {
    const float lo = float(code_value(uint8_t(code))), hi = float(code_value(uint8_t(code + 1)));
    const float mid = (lo + hi) / 2;
    for (const float v : {lo, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) xs.push_back(v), xs.push_back(-v);
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> expo(-14.f, 10.f);
  for (int i = 0; i < 200000; ++i) xs.push_back((i & 1 ? -1.f : 1.f) * std::exp2(expo(rng)));
  for (const float x : xs) ASSERT_EQ(int(float_to_e4m3(x)), int(ref_e4m3(x))) << "x = " << x;
  EXPECT_EQ(float_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(float_to_e4m3(-NAN), 0x7F);
  EXPECT_EQ(float_to_e4m3(-0.f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.f, -10)), 0x00);  // tie between 0 and 2^-9: even
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.f, -10)), 0x02);  // tie between 1 and 2 units of 2^-9: even
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xFE);
}

TEST(Fp8Rounding, DecodesEveryCode) {
  for (int b = 0; b < 256; ++b) {
    const float v = e4m3_to_float(uint8_t(b));
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    EXPECT_EQ(double(v), code_value(uint8_t(b))) << b;
    EXPECT_EQ(int(float_to_e4m3(v)), b) << "code " << b << " does not round-trip";
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.f, -6));
}

// ---- amax ----

TEST(Fp8Amax, TensorRowsAndColumnsWithNanAndInf) {
  const int64_t R = 37, K = 53;
  std::vector<float> x = random_values(R * K, 11, 5.f);
  x[size_t(4 * K + 9)] = NAN;        // row 4, column 9
  x[size_t(20 * K + 30)] = -INFINITY;  // row 20, column 30
  auto at = [&](int64_t r, int64_t k) { return x[size_t(r * K + k)]; };
  std::vector<float> all(1, 0.f), rows(size_t(R), 0.f), cols(size_t(K), 0.f);
  fp8_amax(view(all, 1), Tensor{}, view(x, R, K), Fp8Scaling::tensor);
  fp8_amax(view(rows, R), view(cols, K), view(x, R, K), Fp8Scaling::row);
  EXPECT_TRUE(std::isnan(all[0]));
  const std::vector<double> rr = ref_group_amax(Fp8Scaling::row, R, K, at);
  const std::vector<double> rc = ref_group_amax(Fp8Scaling::row, K, R, [&](int64_t k, int64_t r) { return at(r, k); });
  for (int64_t r = 0; r < R; ++r) EXPECT_TRUE(same_floats({rows[size_t(r)]}, {float(rr[size_t(r)])})) << r;
  for (int64_t k = 0; k < K; ++k) EXPECT_TRUE(same_floats({cols[size_t(k)]}, {float(rc[size_t(k)])})) << k;
  EXPECT_TRUE(std::isnan(rows[4]) && std::isnan(cols[9]));
  EXPECT_TRUE(std::isinf(rows[20]) && std::isinf(cols[30]));
  EXPECT_NE(test::error_of([&] { fp8_amax(view(all, 1), Tensor{}, view(x, R, K), Fp8Scaling::block_1x128); })
                .find("inside fp8_quantize"),
            std::string::npos);
}

// ---- the quantizer ----

TEST(Fp8Quantize, EveryScalingMatchesTheReferenceOnOddShapes) {
  const std::pair<int64_t, int64_t> shapes[] = {{5, 7}, {1, 1}, {128, 128}, {130, 257}, {256, 384}, {129, 640}};
  for (const auto& [R, K] : shapes)
    for (const Fp8Scaling s : kScalings) {
      SCOPED_TRACE(std::to_string(R) + "x" + std::to_string(K) + " " + fp8_scaling_name(s));
      std::vector<float> x = random_values(R * K, uint64_t(R * 1000 + K), 3.f);
      HostOperand q(R, K, s), qt(K, R, s);
      quantize(x, R, K, s, &q, &qt);
      const Quantized want = ref_quantize(s, R, K, [&](int64_t r, int64_t k) { return x[size_t(r * K + k)]; });
      const Quantized want_t = ref_quantize(s, K, R, [&](int64_t k, int64_t r) { return x[size_t(r * K + k)]; });
      EXPECT_EQ(q.codes, want.codes) << first_code_mismatch(q.codes, want.codes);
      EXPECT_TRUE(same_floats(q.factors, want.factors));
      EXPECT_EQ(qt.codes, want_t.codes) << first_code_mismatch(qt.codes, want_t.codes);
      EXPECT_TRUE(same_floats(qt.factors, want_t.factors));
    }
}

// One row of 1x128 blocks, each a special case, and the same blocks under every other scaling.
TEST(Fp8Quantize, SpecialBlocks) {
  const int64_t R = 2, K = 7 * 128;
  std::vector<float> x = random_values(R * K, 5, 1.f);
  auto block = [&](int64_t b) { return x.begin() + b * 128; };  // row 0, block b
  std::fill(block(0), block(1), 0.f);                             // all zero: factor 1, codes 0
  std::fill(block(1), block(2), -3.25f);                          // constant: every code -448
  x[size_t(2 * 128 + 5)] = NAN;                                   // NaN: factor NaN, every code NaN
  x[size_t(3 * 128 + 6)] = INFINITY;                              // inf: factor inf
  for (int64_t i = 0; i < 128; ++i) x[size_t(4 * 128 + i)] = (i % 3 - 1) * 1e-40f;  // tiny amax: scale FLT_MAX
  for (int64_t i = 0; i < 128; ++i) x[size_t(5 * 128 + i)] = std::ldexp(float(i % 17) - 8.f, -16);  // subnormal codes
  x[size_t(6 * 128)] = 448.f, x[size_t(6 * 128 + 1)] = -0.f;     // the saturation bound itself, a negative zero
  for (const Fp8Scaling s : kScalings) {
    SCOPED_TRACE(fp8_scaling_name(s));
    HostOperand q(R, K, s), qt(K, R, s);
    quantize(x, R, K, s, &q, &qt);
    auto at = [&](int64_t r, int64_t k) { return x[size_t(r * K + k)]; };
    const Quantized want = ref_quantize(s, R, K, at);
    const Quantized want_t = ref_quantize(s, K, R, [&](int64_t k, int64_t r) { return at(r, k); });
    EXPECT_EQ(q.codes, want.codes) << first_code_mismatch(q.codes, want.codes);
    EXPECT_TRUE(same_floats(q.factors, want.factors));
    EXPECT_EQ(qt.codes, want_t.codes) << first_code_mismatch(qt.codes, want_t.codes);
    EXPECT_TRUE(same_floats(qt.factors, want_t.factors));
    if (s != Fp8Scaling::block_1x128) continue;
    const std::vector<float>& f = q.factors;  // (7, 2): element (kb, r) at kb*2 + r
    EXPECT_EQ(f[0], 1.f);
    for (int64_t i = 0; i < 128; ++i) EXPECT_EQ(q.codes[size_t(i)], 0x00);
    for (int64_t i = 128; i < 256; ++i) EXPECT_EQ(q.codes[size_t(i)], 0xFE);
    EXPECT_TRUE(std::isnan(f[2 * 2]) && fp8_factor_is_bad(f[2 * 2]));
    for (int64_t i = 256; i < 384; ++i) EXPECT_EQ(q.codes[size_t(i)] & 0x7F, 0x7F);
    EXPECT_TRUE(std::isinf(f[3 * 2]) && fp8_factor_is_bad(f[3 * 2]));
    EXPECT_EQ(q.codes[size_t(3 * 128 + 6)], 0x7F);  // inf * 0 is NaN: the bad block stays visible in its codes
    EXPECT_EQ(f[4 * 2], 1.f / FLT_MAX);
    EXPECT_FALSE(fp8_factor_is_bad(f[1 * 2]) || fp8_factor_is_bad(f[4 * 2]) || fp8_factor_is_bad(f[5 * 2]));
    EXPECT_EQ(q.codes[size_t(6 * 128)], 0x7E);
    EXPECT_EQ(q.codes[size_t(6 * 128 + 1)], 0x80);
  }
}

TEST(Fp8Quantize, TransposedCopyEqualsQuantizingTheTranspose) {
  const int64_t R = 200, K = 300;
  std::vector<float> x = random_values(R * K, 9, 2.f), xt(size_t(R * K));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) xt[size_t(k * R + r)] = x[size_t(r * K + k)];
  for (const Fp8Scaling s : kScalings) {
    SCOPED_TRACE(fp8_scaling_name(s));
    HostOperand q(R, K, s), qt(K, R, s), q_of_t(K, R, s);
    quantize(x, R, K, s, &q, &qt);
    quantize(xt, K, R, s, &q_of_t, nullptr);
    EXPECT_EQ(qt.codes, q_of_t.codes);
    EXPECT_TRUE(same_floats(qt.factors, q_of_t.factors));
    if (s == Fp8Scaling::tensor || s == Fp8Scaling::block_128x128) {  // one factor per element either way
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k)
          ASSERT_EQ(q.codes[size_t(r * K + k)], qt.codes[size_t(k * R + r)]) << r << "," << k;
    }
  }
}

TEST(Fp8Quantize, RefusesWhatItCannotDo) {
  std::vector<float> x = random_values(64, 1, 1.f);
  HostOperand t(8, 8, Fp8Scaling::tensor), r(8, 8, Fp8Scaling::row);
  EXPECT_NE(test::error_of([&] { fp8_quantize(t.op, r.op, view(x, 8, 8), Tensor{}, Tensor{}); }).find("one scaling"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { fp8_quantize(t.op, Fp8Operand{}, view(x, 8, 8), Tensor{}, Tensor{}); })
                .find("fp8_amax"),
            std::string::npos);
  HostOperand wrong(8, 4, Fp8Scaling::tensor);
  std::vector<float> amax(1, 1.f);
  EXPECT_NE(test::error_of([&] { fp8_quantize(wrong.op, Fp8Operand{}, view(x, 8, 8), view(amax, 1), Tensor{}); })
                .find("expected (8,8)"),
            std::string::npos);
}

// ---- the GEMM ----

// c (M,N) in fp64 from the dequantized operands, + beta * c0.
std::vector<double> ref_gemm(const HostOperand& a, const HostOperand& b, int64_t M, int64_t N, int64_t K,
                             const std::vector<float>& c0, float beta) {
  std::vector<double> c(size_t(M * N));
  auto deq = [&](const HostOperand& o, int64_t R, int64_t r, int64_t k) {
    return code_value(o.codes[size_t(r * K + k)]) *
           double(o.factors[size_t(fp8_scale_index(o.op.scaling, R, K, r, k))]);
  };
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += deq(a, M, i, k) * deq(b, N, j, k);
      c[size_t(i * N + j)] = s + double(beta) * c0[size_t(i * N + j)];
    }
  return c;
}

TEST(GemmFp8, EveryPairMatchesFp64OfTheDequantizedOperands) {
  const int64_t M = 256, N = 128, K = 384;
  const std::pair<Fp8Scaling, Fp8Scaling> pairs[] = {{Fp8Scaling::tensor, Fp8Scaling::tensor},
                                                     {Fp8Scaling::row, Fp8Scaling::row},
                                                     {Fp8Scaling::block_1x128, Fp8Scaling::block_128x128},
                                                     {Fp8Scaling::block_128x128, Fp8Scaling::block_1x128},
                                                     {Fp8Scaling::block_1x128, Fp8Scaling::block_1x128}};
  for (const auto& [sa, sb] : pairs)
    for (const float beta : {0.f, 1.f}) {
      SCOPED_TRACE(std::string(fp8_scaling_name(sa)) + " x " + fp8_scaling_name(sb) + " beta " + std::to_string(beta));
      std::vector<float> xa = random_values(M * K, 21, 2.f), xb = random_values(N * K, 22, 0.02f);
      HostOperand a(M, K, sa), b(N, K, sb);
      quantize(xa, M, K, sa, &a, nullptr);
      quantize(xb, N, K, sb, &b, nullptr);
      std::vector<float> c0 = random_values(M * N, 23, 1.f), c = c0;
      gemm_fp8(view(c, M, N), a.op, b.op, beta, false);
      const std::vector<double> want = ref_gemm(a, b, M, N, K, c0, beta);
      double num = 0, den = 0;
      for (size_t i = 0; i < c.size(); ++i) {
        ASSERT_FALSE(std::isnan(c[i])) << i;
        num += (c[i] - want[i]) * (c[i] - want[i]), den += want[i] * want[i];
      }
      EXPECT_LT(std::sqrt(num / den), 1e-6);
    }
}

// gemm_fp8_gelu / gemm_fp8_dgelu on the host against fp64: pre = a b^T, out = gelu(pre) (tanh form), dpre =
// (a b^T) * gelu'(pre_in); each amax is max |output| of what the op wrote, and NaN when a NaN reaches the output.
double gelu_fp64(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double dgelu_fp64(double x) {
  const double t = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3 * 0.044715 * x * x);
}

TEST(GemmFp8, GeluAndDgeluMatchFp64AndGiveTheAmaxOfTheirOutput) {
  const int64_t M = 128, N = 256, K = 256;
  const Fp8Scaling s = Fp8Scaling::tensor;
  std::vector<float> xa = random_values(M * K, 31, 1.f), xb = random_values(N * K, 32, 0.08f);
  HostOperand a(M, K, s), b(N, K, s);
  quantize(xa, M, K, s, &a, nullptr);
  quantize(xb, N, K, s, &b, nullptr);
  const std::vector<double> acc = ref_gemm(a, b, M, N, K, std::vector<float>(size_t(M * N), 0.f), 0.f);
  auto rel = [](const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    return std::sqrt(num / den);
  };
  auto max_abs = [](const std::vector<float>& v) {
    float m = 0.f;
    for (const float x : v) m = std::max(m, std::fabs(x));
    return m;
  };
  std::vector<float> out(size_t(M * N), NAN), pre(size_t(M * N), NAN), amax(1, NAN);
  gemm_fp8_gelu(view(out, M, N), view(pre, M, N), view(amax, 1), a.op, b.op);
  std::vector<double> want_out(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) want_out[i] = gelu_fp64(acc[i]);
  EXPECT_LT(rel(pre, acc), 1e-6);
  EXPECT_LT(rel(out, want_out), 1e-6);
  EXPECT_EQ(amax[0], max_abs(out));

  std::vector<float> pre_in = random_values(M * N, 33, 2.f), dpre(size_t(M * N), NAN);
  gemm_fp8_dgelu(view(dpre, M, N), view(amax, 1), a.op, b.op, view(pre_in, M, N));
  std::vector<double> want_d(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) want_d[i] = acc[i] * dgelu_fp64(pre_in[i]);
  EXPECT_LT(rel(dpre, want_d), 1e-5);
  EXPECT_EQ(amax[0], max_abs(dpre));

  a.codes[size_t(5 * K + 7)] = 0x7F;  // a NaN code: row 5 of the outputs is NaN, and so is the amax
  gemm_fp8_gelu(view(out, M, N), view(pre, M, N), view(amax, 1), a.op, b.op);
  EXPECT_TRUE(std::isnan(amax[0])) << amax[0];
  gemm_fp8_dgelu(view(dpre, M, N), view(amax, 1), a.op, b.op, view(pre_in, M, N));
  EXPECT_TRUE(std::isnan(amax[0])) << amax[0];
  std::vector<float> none_out(size_t(M * N), NAN);  // amax undefined: not taken, the outputs still written
  gemm_fp8_gelu(view(none_out, M, N), view(pre, M, N), Tensor{}, a.op, b.op);
  EXPECT_FALSE(std::isnan(none_out[0]));  // row 0 has no NaN
  EXPECT_TRUE(std::isnan(none_out[size_t(5 * N)]));
}

TEST(GemmFp8, RefusesWhatTheRecipeCannotTile) {
  auto error_for = [](int64_t M, int64_t N, int64_t K, Fp8Scaling sa, Fp8Scaling sb) {
    HostOperand a(M, K, sa), b(N, K, sb);
    std::fill(a.factors.begin(), a.factors.end(), 1.f), std::fill(b.factors.begin(), b.factors.end(), 1.f);
    std::vector<float> c(size_t(M * N));
    return test::error_of([&] { gemm_fp8(view(c, M, N), a.op, b.op, 0.f, false); });
  };
  const std::string k = error_for(32, 32, 40, Fp8Scaling::tensor, Fp8Scaling::tensor);
  EXPECT_NE(k.find("K = 40"), std::string::npos) << k;
  EXPECT_NE(k.find("multiple of 16"), std::string::npos) << k;
  const std::string m = error_for(64, 128, 128, Fp8Scaling::block_1x128, Fp8Scaling::block_128x128);
  EXPECT_NE(m.find("M = 64"), std::string::npos) << m;
  EXPECT_NE(m.find("multiple of 128"), std::string::npos) << m;
  EXPECT_NE(error_for(128, 128, 128, Fp8Scaling::block_128x128, Fp8Scaling::block_128x128).find("at most one"),
            std::string::npos);
  EXPECT_NE(error_for(32, 32, 32, Fp8Scaling::tensor, Fp8Scaling::row).find("supported pairs"), std::string::npos);
  EXPECT_EQ(error_for(32, 32, 32, Fp8Scaling::tensor, Fp8Scaling::tensor), "<no error>");
}

}  // namespace
}  // namespace rt
