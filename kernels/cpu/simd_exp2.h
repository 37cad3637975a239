// Vectorised exp2 for the CPU softmaxes (attention, cross-entropy), written with GCC vector extensions so
// it compiles to AVX2+FMA inside target("avx2,fma") callers and to SSE2 elsewhere.
// 2^x = 2^round(x) * p(x - round(x)), p a degree-6 polynomial on [-0.5, 0.5] (relative error ~2e-7).
// Arguments below -126 give exactly 0. Callers pass finite arguments (never -inf).
#pragma once
#include <cstdint>

namespace rt {
namespace cpu {

typedef float simd_vec8 __attribute__((vector_size(32)));
typedef float simd_vec8u __attribute__((vector_size(32), aligned(4)));  // unaligned access
typedef int32_t simd_ivec8 __attribute__((vector_size(32)));

// x = 2^x in place, lane by lane.
__attribute__((always_inline)) inline void simd_exp2_lanes(simd_vec8& x) {
  const simd_ivec8 tiny = x < -126.f;                                    // lanes that underflow to 0
  x = tiny ? simd_vec8{} - 126.f : x;
  const simd_vec8 xr = x + 0.5f;
  simd_ivec8 n = __builtin_convertvector(xr, simd_ivec8);                // trunc
  n += (__builtin_convertvector(n, simd_vec8) > xr);                     // -> floor(x + 0.5)
  const simd_vec8 f = x - __builtin_convertvector(n, simd_vec8);         // [-0.5, 0.5]
  simd_vec8 p = 1.535336188319500e-4f * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.f;
  const simd_ivec8 two_n = (n + 127) << 23;                              // bits of 2^n
  const simd_ivec8 r = __builtin_bit_cast(simd_ivec8, p * __builtin_bit_cast(simd_vec8, two_n));
  x = __builtin_bit_cast(simd_vec8, r & ~tiny);
}

// y[k] = exp2((x[k] - shift) * scale) for k < n, returning the sum (accumulated in fp64 every 512 terms).
// y may be x (in place) or nullptr (sum only).
__attribute__((always_inline)) inline double simd_exp2_sum(const float* x, float* y, int64_t n, float shift,
                                                           float scale) {
  double total = 0;
  simd_vec8 acc{};
  int64_t k = 0, block = 0;
  for (; k + 8 <= n; k += 8) {
    simd_vec8 e = (*reinterpret_cast<const simd_vec8u*>(x + k) - shift) * scale;
    simd_exp2_lanes(e);
    if (y) *reinterpret_cast<simd_vec8u*>(y + k) = e;
    acc += e;
    if (++block == 64) {
      for (int t = 0; t < 8; ++t) total += acc[t];
      acc = simd_vec8{};
      block = 0;
    }
  }
  for (int t = 0; t < 8; ++t) total += acc[t];
  if (k < n) {
    alignas(32) float tail[8];
    for (int64_t t = 0; t < 8; ++t) tail[t] = k + t < n ? (x[k + t] - shift) * scale : -1000.f;
    simd_vec8 e = *reinterpret_cast<const simd_vec8*>(tail);
    simd_exp2_lanes(e);
    for (int64_t t = 0; k + t < n; ++t) {
      if (y) y[k + t] = e[t];
      total += e[t];
    }
  }
  return total;
}

}  // namespace cpu
}  // namespace rt
