// fp8_dequantize on the CPU (kernels/cpu/fp8_dequantize.cpp) against a reference written here: every code's value
// from its bits (sign, 4 exponent bits with bias 7, 3 mantissa bits; subnormals below exponent 1) times the factor
// 1 / (448 / amax) in fp64, rounded to f32 once. Specials: NaN codes (0x7F, 0xFF), a NaN amax, amax 0 (factor 1),
// -0, the saturation codes, and the round trip with fp8_quantize (dequantize(quantize(x)) is x within a rounding
// step, and quantizing the result again gives the same codes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ops.h"

namespace rt {
namespace {

double ref_code_value(uint8_t b) {
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int exp = (b >> 3) & 0xF, man = b & 7;
  if (exp == 0) return sign * man * std::ldexp(1.0, -9);
  return sign * (1.0 + man / 8.0) * std::ldexp(1.0, exp - 7);
}

std::vector<float> dequantize(const std::vector<uint8_t>& codes, float amax) {
  std::vector<uint8_t> q = codes;
  std::vector<float> out(codes.size(), -12345.f), a = {amax};  // out poisoned
  fp8_dequantize(Tensor(out.data(), DType::f32, Device::cpu(), {int64_t(out.size())}),
                 Tensor(q.data(), DType::e4m3, Device::cpu(), {int64_t(q.size())}),
                 Tensor(a.data(), DType::f32, Device::cpu(), {1}));
  return out;
}

TEST(Fp8Dequantize, EveryCodeTimesTheFactorOfTheAmax) {
  std::vector<uint8_t> codes(256);
  for (int b = 0; b < 256; ++b) codes[size_t(b)] = uint8_t(b);
  for (const float amax : {3.7f, 0.0123f, 448.f, 1e-30f, 0.f}) {
    const double factor = amax == 0.f ? 1.0 : double(1.f / (448.f / amax));  // kernels/fp8.h's f32 factor
    const std::vector<float> got = dequantize(codes, amax);
    for (int b = 0; b < 256; ++b) {
      if ((b & 0x7F) == 0x7F) {
        EXPECT_TRUE(std::isnan(got[size_t(b)])) << "code " << b << " is NaN";
        continue;
      }
      const float want = float(ref_code_value(uint8_t(b)) * factor);  // exact product of a 4-bit and a 24-bit value
      EXPECT_EQ(got[size_t(b)], want) << "code " << b << " amax " << amax;
    }
    EXPECT_TRUE(std::signbit(got[0x80])) << "-0 keeps its sign";
  }
  for (float v : dequantize(codes, std::nanf(""))) EXPECT_TRUE(std::isnan(v)) << "a NaN amax makes every value NaN";
}

TEST(Fp8Dequantize, InvertsTheTensorwiseQuantization) {
  std::mt19937_64 g(9);
  std::normal_distribution<float> n(0.f, 0.3f);
  const int64_t R = 24, K = 40;
  std::vector<float> x(size_t(R * K));
  for (float& v : x) v = n(g);
  std::vector<float> amax(1), factor(1), factor2(1), back(x.size());
  std::vector<uint8_t> codes(x.size()), again(x.size());
  const Tensor xt(x.data(), DType::f32, Device::cpu(), {R, K}), at(amax.data(), DType::f32, Device::cpu(), {1});
  fp8_amax(at, Tensor{}, xt, Fp8Scaling::tensor);
  fp8_quantize(Fp8Operand{Tensor(codes.data(), DType::e4m3, Device::cpu(), {R, K}),
                          Tensor(factor.data(), DType::f32, Device::cpu(), {1}), Fp8Scaling::tensor},
               Fp8Operand{}, xt, at, Tensor{});
  const Tensor bt(back.data(), DType::f32, Device::cpu(), {R, K});
  fp8_dequantize(bt, Tensor(codes.data(), DType::e4m3, Device::cpu(), {R, K}), at);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(back[i], e4m3_to_float(codes[i]) * factor[0]) << i;  // the factor fp8_quantize wrote
    EXPECT_LE(std::fabs(back[i] - x[i]), std::fabs(x[i]) / 16 + 1e-3f * amax[0]) << i;
  }
  // Quantized again with its own amax, the dequantized tensor gives the same codes (the ZeRO-3 E4M3 gather's premise).
  std::vector<float> amax2(1);
  const Tensor a2(amax2.data(), DType::f32, Device::cpu(), {1});
  fp8_amax(a2, Tensor{}, bt, Fp8Scaling::tensor);
  fp8_quantize(Fp8Operand{Tensor(again.data(), DType::e4m3, Device::cpu(), {R, K}),
                          Tensor(factor2.data(), DType::f32, Device::cpu(), {1}), Fp8Scaling::tensor},
               Fp8Operand{}, bt, a2, Tensor{});
  EXPECT_EQ(again, codes);
  EXPECT_NEAR(factor2[0], factor[0], 4e-7 * factor[0]);
}

TEST(Fp8Dequantize, RefusesMismatchedSizesAndDtypes) {
  std::vector<uint8_t> q(8);
  std::vector<float> out(7), a = {1.f};
  EXPECT_THROW(fp8_dequantize(Tensor(out.data(), DType::f32, Device::cpu(), {7}),
                              Tensor(q.data(), DType::e4m3, Device::cpu(), {8}),
                              Tensor(a.data(), DType::f32, Device::cpu(), {1})),
               Error);
  std::vector<float> out8(8), f8(8);
  EXPECT_THROW(fp8_dequantize(Tensor(out8.data(), DType::f32, Device::cpu(), {8}),
                              Tensor(f8.data(), DType::f32, Device::cpu(), {8}),
                              Tensor(a.data(), DType::f32, Device::cpu(), {1})),
               Error);
}

}  // namespace
}  // namespace rt
