// Device side of kernels/fp8.h: the E4M3 rounding, the scale from an amax and the NaN-propagating amax, each
// the same arithmetic as the host definitions there (the CUDA quantizer matches the CPU one bit for bit:
// tests/gpu/test_fp8_cuda.cpp). Keep C++17.
#pragma once
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdint>

namespace rt {
namespace cuda {

// f32 -> E4M3 bits: round to nearest even, saturating to +-448 (infinities too), NaN -> 0x7F (the hardware's
// conversion may set the sign of a NaN; the host rule does not).
__device__ __forceinline__ uint8_t e4m3_bits(float v) {
  if (isnan(v)) return 0x7F;
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// Two at once (one cvt instruction on sm_89+): low byte from x, high byte from y.
__device__ __forceinline__ uint16_t e4m3x2_bits(float x, float y) {
  uint16_t r = uint16_t(__nv_cvt_float2_to_fp8x2(make_float2(x, y), __NV_SATFINITE, __NV_E4M3));
  if (isnan(x)) r = uint16_t((r & 0xFF00u) | 0x7Fu);
  if (isnan(y)) r = uint16_t((r & 0x00FFu) | 0x7F00u);
  return r;
}

// Eight values times their multipliers, packed little-endian into 8 bytes.
__device__ __forceinline__ uint2 e4m3x8_bits(const float* v, const float* s) {
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = e4m3x2_bits(v[4 * h] * s[4 * h], v[4 * h + 1] * s[4 * h + 1]);
    const uint32_t hi = e4m3x2_bits(v[4 * h + 2] * s[4 * h + 2], v[4 * h + 3] * s[4 * h + 3]);
    w[h] = lo | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

// fp8_scale_from_amax / fp8_factor_from_scale of kernels/fp8.h (IEEE division: the build has no fast math).
__device__ __forceinline__ float fp8_scale_of(float amax) {
  if (amax == 0.f) return 1.f;
  const float s = __fdiv_rn(448.f, amax);
  return isinf(s) ? FLT_MAX : s;
}
__device__ __forceinline__ float fp8_factor_of(float s) { return __fdiv_rn(1.f, s); }

// |x| as an unsigned key whose integer order is the NaN-propagating max: finite < inf < NaN (any NaN payload).
__device__ __forceinline__ uint32_t amax_key(float x) { return __float_as_uint(x) & 0x7FFFFFFFu; }
__device__ __forceinline__ float amax_of_key(uint32_t k) { return __uint_as_float(k); }
__device__ __forceinline__ uint32_t warp_max_key(uint32_t k) { return __reduce_max_sync(0xFFFFFFFFu, k); }

// Eight consecutive values of row r, columns [c, c+8), of x (R,K) f32 or bf16, as floats; entries outside x are 0.
// vec: K % 8 == 0 and x 16-byte aligned, so an in-range group is one or two vector loads.
template <class T>
__device__ __forceinline__ void load8(const T* x, int64_t R, int64_t K, int64_t r, int64_t c, bool vec, float* v);

template <>
__device__ __forceinline__ void load8<__nv_bfloat16>(const __nv_bfloat16* x, int64_t R, int64_t K, int64_t r,
                                                     int64_t c, bool vec, float* v) {
  if (vec && r < R && c + 8 <= K) {
    const uint4 u = *reinterpret_cast<const uint4*>(x + r * K + c);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = (r < R && c + i < K) ? __bfloat162float(x[r * K + c + i]) : 0.f;
}

template <>
__device__ __forceinline__ void load8<float>(const float* x, int64_t R, int64_t K, int64_t r, int64_t c, bool vec,
                                             float* v) {
  if (vec && r < R && c + 8 <= K) {
    const float4 a = *reinterpret_cast<const float4*>(x + r * K + c);
    const float4 b = *reinterpret_cast<const float4*>(x + r * K + c + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = (r < R && c + i < K) ? x[r * K + c + i] : 0.f;
}

// Refuses an FP8 op on a GPU older than sm_89 (no FP8 conversion or tensor cores), naming the fix.
void require_fp8_gpu(const char* op);

}  // namespace cuda
}  // namespace rt
