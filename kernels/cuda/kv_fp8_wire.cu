// kv_fp8_quantize / kv_fp8_dequantize on CUDA (kernels/kv_fp8_wire.h): K or V (B, n, Hkv, D) in E4M3 with one
// factor per (sample, 128-row block, K/V head), the codes and factors bit for bit the host code's (fp8_common.cuh's
// rounding and scale). Quantize: one thread block per group, a NaN-propagating amax over the group's 128 x D values
// (integer keys, fp8_common.cuh), then the codes; dequantize: one thread per element. Head dims that are multiples of 8
// (64, 128) take the 8-wide forms below (vector loads and stores). Both are memory-bound passes over one K or V block:
// small beside the attention calls that read the result.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/kv_fp8_wire.h"

namespace rt {
namespace cuda {
namespace {

constexpr int kQuantizeThreads = 256;

// E4M3 bits -> float, exact (through half, which holds every E4M3 value); 0x7F / 0xFF give NaN.
__device__ __forceinline__ float e4m3_to_f32(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3);
  return __half2float(__half(h));
}

// Grid (nb, Hkv, B), block kQuantizeThreads: group (b, hk, rb) = rows [128 rb, min(n, 128 rb + 128)) x D columns of
// head hk of sample b. x (B, n, Hkv, D) f32 / bf16; codes (B, n, Hkv, D) e4m3; factors (B, Hkv, nb) f32.
__global__ void kv_quantize_kernel(FloatPtr x, uint8_t* __restrict__ codes, float* __restrict__ factors, int64_t n,
                                   int64_t Hkv, int64_t D, int64_t nb) {
  __shared__ uint32_t warp_keys[kQuantizeThreads / 32];
  const int64_t rb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int64_t t0 = rb * kKvFp8RowBlock, rows = min(kKvFp8RowBlock, n - t0), count = rows * D;
  const int64_t row = Hkv * D;                              // elements of one token's K (or V)
  const int64_t base = (b * n + t0) * row + hk * D;         // element (t0, hk, 0) of sample b
  uint32_t key = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t at = base + (i / D) * row + i % D;
    key = max(key, amax_key(x.ld(at)));
  }
  key = warp_max_key(key);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_keys[warp] = key;
  __syncthreads();
  key = lane < int(blockDim.x >> 5) ? warp_keys[lane] : 0u;
  key = warp_max_key(key);  // every warp holds the group's amax key
  const float s = fp8_scale_of(amax_of_key(key));
  if (threadIdx.x == 0) factors[(b * Hkv + hk) * nb + rb] = fp8_factor_of(s);
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t at = base + (i / D) * row + i % D;
    codes[at] = e4m3_bits(x.ld(at) * s);
  }
}

// One thread per element of out (B, n, Hkv, D): e4m3 value of its code times its group's factor (B, Hkv, nb).
__global__ void kv_dequantize_kernel(FloatPtr out, const uint8_t* __restrict__ codes,
                                     const float* __restrict__ factors, int64_t total, int64_t n, int64_t Hkv,
                                     int64_t D, int64_t nb) {
  RT_GRID_STRIDE(i, total) {
    const int64_t hk = (i / D) % Hkv, t = (i / (D * Hkv)) % n, b = i / (D * Hkv * n);
    out.st(i, e4m3_to_f32(codes[i]) * factors[(b * Hkv + hk) * nb + t / kKvFp8RowBlock]);
  }
}

// The same two passes 8 values at a time (D % 8 == 0, x 16-byte and codes 8-byte aligned): x is read as the (B n,
// Hkv D) matrix of load8 (fp8_common.cuh), each chunk of 8 columns of one row one or two vector loads and one 8-byte
// store of codes (e4m3x8_bits: the scalar rounding, NaN -> 0x7F).
template <class T>
__global__ void kv_quantize_vec_kernel(const T* __restrict__ x, uint8_t* __restrict__ codes,
                                       float* __restrict__ factors, int64_t B, int64_t n, int64_t Hkv, int64_t D,
                                       int64_t nb) {
  __shared__ uint32_t warp_keys[kQuantizeThreads / 32];
  const int64_t rb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int64_t t0 = rb * kKvFp8RowBlock, rows = min(kKvFp8RowBlock, n - t0), chunks = D / 8, count = rows * chunks;
  const int64_t R = B * n, K = Hkv * D;  // x as a (R, K) matrix
  float v[8];
  uint32_t key = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    load8<T>(x, R, K, b * n + t0 + i / chunks, hk * D + (i % chunks) * 8, /*vec=*/true, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) key = max(key, amax_key(v[j]));
  }
  key = warp_max_key(key);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_keys[warp] = key;
  __syncthreads();
  key = lane < int(blockDim.x >> 5) ? warp_keys[lane] : 0u;
  key = warp_max_key(key);  // every warp holds the group's amax key
  const float s = fp8_scale_of(amax_of_key(key));
  if (threadIdx.x == 0) factors[(b * Hkv + hk) * nb + rb] = fp8_factor_of(s);
  float sv[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) sv[j] = s;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t r = b * n + t0 + i / chunks, c = hk * D + (i % chunks) * 8;
    load8<T>(x, R, K, r, c, /*vec=*/true, v);
    *reinterpret_cast<uint2*>(codes + r * K + c) = e4m3x8_bits(v, sv);
  }
}

// groups = B n Hkv D / 8 chunks of 8 codes (D % 8 == 0, codes 8-byte and out 16-byte aligned); chunk g lies in row
// (b, t, hk) = g / (D / 8).
template <class T>
__global__ void kv_dequantize_vec_kernel(T* __restrict__ out, const uint2* __restrict__ codes,
                                         const float* __restrict__ factors, int64_t groups, int64_t n, int64_t Hkv,
                                         int64_t chunks, int64_t nb) {
  RT_GRID_STRIDE(g, groups) {
    const int64_t row = g / chunks, hk = row % Hkv, bt = row / Hkv, t = bt % n, b = bt / n;
    const float f = factors[(b * Hkv + hk) * nb + t / kKvFp8RowBlock];
    const uint2 w = __ldg(codes + g);
    float v[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = e4m3_to_f32(uint8_t(w.x >> (8 * i))) * f;
      v[4 + i] = e4m3_to_f32(uint8_t(w.y >> (8 * i))) * f;
    }
    if constexpr (sizeof(T) == 2) {
      uint4 o;
      uint32_t* p = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        p[i] = *reinterpret_cast<const uint32_t*>(&h);
      }
      reinterpret_cast<uint4*>(out)[g] = o;
    } else {
      float4* o = reinterpret_cast<float4*>(out) + 2 * g;
      o[0] = make_float4(v[0], v[1], v[2], v[3]);
      o[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

// Arguments checked by kernels/kv_fp8_wire.cpp (shapes, dtypes, one device).
void kv_fp8_quantize(Tensor codes, Tensor factors, const Tensor& x) {
  const char* op = "kv_fp8_quantize";
  cudaStream_t stream = stream_for(x, op);
  const FloatPtr xp = float_arg(x, x.device, op, "x");
  const int64_t B = x.size(0), n = x.size(1), Hkv = x.size(2), D = x.size(3), nb = kv_fp8_row_blocks(n);
  if (x.numel() == 0) return;
  RT_CHECK(nb <= 2147483647 && Hkv <= 65535 && B <= 65535,
           op << ": the grid (" << nb << ", " << Hkv << ", " << B << ") exceeds CUDA's limits");
  const dim3 grid{unsigned(nb), unsigned(Hkv), unsigned(B)};
  if (D % 8 == 0 && aligned(x.data, 16) && aligned(codes.data, 8)) {
    if (xp.bf16)
      kv_quantize_vec_kernel<__nv_bfloat16><<<grid, kQuantizeThreads, 0, stream>>>(
          x.ptr<const __nv_bfloat16>(), codes.ptr<uint8_t>(), factors.ptr<float>(), B, n, Hkv, D, nb);
    else
      kv_quantize_vec_kernel<float><<<grid, kQuantizeThreads, 0, stream>>>(
          x.ptr<const float>(), codes.ptr<uint8_t>(), factors.ptr<float>(), B, n, Hkv, D, nb);
  } else {
    kv_quantize_kernel<<<grid, kQuantizeThreads, 0, stream>>>(xp, codes.ptr<uint8_t>(), factors.ptr<float>(), n, Hkv,
                                                              D, nb);
  }
  CUDA_CHECK_LAUNCH();
}

void kv_fp8_dequantize(Tensor out, const Tensor& codes, const Tensor& factors) {
  const char* op = "kv_fp8_dequantize";
  cudaStream_t stream = stream_for(out, op);
  const FloatPtr o = float_arg(out, out.device, op, "out");
  const int64_t n = out.size(1), Hkv = out.size(2), D = out.size(3), total = out.numel();
  if (total == 0) return;
  const int64_t nb = kv_fp8_row_blocks(n);
  if (D % 8 == 0 && aligned(codes.data, 8) && aligned(out.data, 16)) {
    const int64_t groups = total / 8;
    const uint2* q = codes.ptr<const uint2>();
    if (o.bf16)
      kv_dequantize_vec_kernel<__nv_bfloat16><<<grid_for(groups), kThreads, 0, stream>>>(
          out.ptr<__nv_bfloat16>(), q, factors.ptr<const float>(), groups, n, Hkv, D / 8, nb);
    else
      kv_dequantize_vec_kernel<float><<<grid_for(groups), kThreads, 0, stream>>>(
          out.ptr<float>(), q, factors.ptr<const float>(), groups, n, Hkv, D / 8, nb);
  } else {
    kv_dequantize_kernel<<<grid_for(total), kThreads, 0, stream>>>(o, codes.ptr<const uint8_t>(),
                                                                   factors.ptr<const float>(), total, n, Hkv, D, nb);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
