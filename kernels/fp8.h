// FP8 (E4M3) training building blocks: the scaling granularities, the operand type of the FP8 ops
// (fp8_amax, fp8_quantize, gemm_fp8 in kernels/op_list.inc), the layouts of their scale tensors, and the host
// definition of the rounding every backend reproduces bit for bit.
//
// Format: E4M3 (OCP "e4m3fn": bias 7, no infinities, 0x7F / 0xFF NaN, max normal 448, smallest subnormal 2^-9)
// for every operand: activations, weights and gradients. With current scaling (a scale per tensor, row or block
// from this step's amax) the range a gradient needs is carried by its scale, so E5M2's two extra binades buy
// nothing while its lost mantissa bit doubles the rounding error; this is DeepSeek-V3's and torchao's choice,
// and cuBLASLt's block-scaled Hopper kernels take E4M3 operands.
//
// Quantization of a group (the whole tensor, a row, a 1x128 or a 128x128 block) with amax a = max |x| over it:
//   s = 448 / a  (a = 0: s = 1; s overflowing f32: s = FLT_MAX),  q = e4m3(x * s)  (round to nearest even,
//   saturating: |x*s| >= 448 gives +-448, +-inf too; NaN gives 0x7F), factor = 1 / s (f32).
// The scale tensors hold the factors (dequantization: x ~= e4m3_value(q) * factor), which is what the GEMM
// multiplies by. A NaN anywhere in a group makes its amax and factor NaN; an infinite amax makes its factor
// infinite: a non-finite factor is how a caller detects a bad tensor (fp8_factor_is_bad).
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/tensor.h"

namespace rt {

constexpr float kE4M3Max = 448.f;

// How an FP8 operand (R, K) (K the contraction dimension, contiguous) is scaled.
enum class Fp8Scaling : uint8_t {
  tensor,        // one factor
  row,           // one factor per row (cuBLASLt OUTER_VEC_32F)
  block_1x128,   // one factor per 128 consecutive elements of a row (VEC128_32F): activations and gradients
  block_128x128  // one factor per 128x128 block (BLK128x128_32F): weights
};
const char* fp8_scaling_name(Fp8Scaling s);

// The recipes of `fp8.recipe` and the scaling each gives an operand.
enum class Fp8Recipe : uint8_t { tensorwise, rowwise, block };
const char* fp8_recipe_name(Fp8Recipe r);
// Activations and gradients take block_1x128 under the block recipe, weights block_128x128.
inline Fp8Scaling fp8_scaling_for(Fp8Recipe recipe, bool is_weight) {
  switch (recipe) {
    case Fp8Recipe::tensorwise: return Fp8Scaling::tensor;
    case Fp8Recipe::rowwise: return Fp8Scaling::row;
    case Fp8Recipe::block: return is_weight ? Fp8Scaling::block_128x128 : Fp8Scaling::block_1x128;
  }
  return Fp8Scaling::tensor;
}

// An FP8 operand: data (R, K) e4m3, row-major (K-major), and its factors (f32, shape fp8_scale_shape).
struct Fp8Operand {
  Tensor data;
  Tensor scale;
  Fp8Scaling scaling = Fp8Scaling::tensor;
  bool defined() const { return data.defined(); }
};

// The leading dimension of a 128x128 scale tensor: ceil(cols / 128) rounded up to 4 (cuBLASLt's layout).
inline int64_t fp8_block_ld(int64_t cols) { return ((cols + 127) / 128 + 3) / 4 * 4; }

// The shape of the scale tensor of an (R, K) operand; row-major, as cuBLASLt reads it:
//   tensor (1); row (R); block_1x128 (ceil(K/128), R): element (kb, r) is the factor of row r's block kb (rows
//   contiguous); block_128x128 (ceil(R/128), fp8_block_ld(K)): element (rb, kb) (the padding columns unused).
struct Fp8ScaleShape {
  int ndim;
  int64_t d0, d1;
  int64_t numel() const { return ndim == 1 ? d0 : d0 * d1; }
};
inline Fp8ScaleShape fp8_scale_shape(Fp8Scaling s, int64_t R, int64_t K) {
  switch (s) {
    case Fp8Scaling::tensor: return {1, 1, 1};
    case Fp8Scaling::row: return {1, R, 1};
    case Fp8Scaling::block_1x128: return {2, (K + 127) / 128, R};
    case Fp8Scaling::block_128x128: return {2, (R + 127) / 128, fp8_block_ld(K)};
  }
  return {1, 1, 1};
}
// The index into the scale tensor of the factor of element (r, k) of an (R, K) operand.
inline int64_t fp8_scale_index(Fp8Scaling s, int64_t R, int64_t K, int64_t r, int64_t k) {
  switch (s) {
    case Fp8Scaling::tensor: return 0;
    case Fp8Scaling::row: return r;
    case Fp8Scaling::block_1x128: return (k / 128) * R + r;
    case Fp8Scaling::block_128x128: return (r / 128) * fp8_block_ld(K) + k / 128;
  }
  return 0;
}

// Checks an operand's data ((R, K) e4m3 on `device`) and scale (f32, fp8_scale_shape) and names what is wrong.
void check_fp8_operand(const Fp8Operand& op_, int64_t R, int64_t K, const Device& device, const char* op,
                       const char* arg);

// gemm_fp8's tiling rule, checked by both backends so a CPU rank refuses what a GPU rank would: every dimension
// a multiple of 16 (cuBLASLt's FP8 kernels), and for block scalings M, N, K multiples of 128. `what` names the
// GEMM for the message (e.g. "layer 3 mlp.fc forward").
void check_fp8_gemm_tiling(Fp8Scaling a_scaling, Fp8Scaling b_scaling, int64_t M, int64_t N, int64_t K,
                           const char* what);

// ---- the rounding, on the host (kernels/cuda/fp8_common.cuh reproduces it on the device) ----

// f32 -> E4M3 bits, round to nearest even, saturating to +-448 (infinities too); NaN -> 0x7F; the sign of
// zero is kept.
inline uint8_t float_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | 0x7E;
  if (a < 0.015625f) {                                  // below 2^-6: subnormal, units of 2^-9
    const float m = std::nearbyint(a * 512.f);           // exact scaling; RNE (default rounding mode)
    return sign | uint8_t(m);                            // m = 8 is 0x08, the smallest normal
  }
  int e = 0;
  const float f = std::frexp(a, &e);                     // a = f 2^e, f in [0.5, 1)
  float m = std::nearbyint((2.f * f - 1.f) * 8.f);       // 3 mantissa bits, RNE
  int exp = e - 1;
  if (m == 8.f) m = 0.f, ++exp;
  return sign | uint8_t(((exp + 7) << 3) | int(m));     // a < 448, so the result is finite
}

inline float e4m3_to_float(uint8_t b) {
  const float sign = (b & 0x80) ? -1.f : 1.f;
  if ((b & 0x7F) == 0x7F) return std::nanf("");
  const int exp = (b >> 3) & 0xF, man = b & 7;
  if (exp == 0) return sign * std::ldexp(float(man), -9);
  return sign * std::ldexp(float(8 + man), exp - 10);
}

// The multiplier s of a group with amax a (see the top of this file).
inline float fp8_scale_from_amax(float amax) {
  if (amax == 0.f) return 1.f;
  const float s = kE4M3Max / amax;  // NaN for NaN, 0 for inf
  return std::isinf(s) ? FLT_MAX : s;
}
inline float fp8_factor_from_scale(float s) { return 1.f / s; }
// One step of a NaN-propagating amax: max(m, |v|), NaN once either is NaN (std::fmax would drop a NaN).
inline float fp8_amax_join(float m, float v) {
  if (std::isnan(m)) return m;
  const float a = std::fabs(v);
  return (std::isnan(a) || a > m) ? a : m;
}
inline bool fp8_factor_is_bad(float factor) { return !std::isfinite(factor); }

}  // namespace rt
