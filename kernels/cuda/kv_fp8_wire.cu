// kv_fp8_quantize / kv_fp8_dequantize on CUDA (kernels/kv_fp8_wire.h): K or V (B, n, Hkv, D) in E4M3 with one
// factor per (sample, 128-row block, K/V head), the codes and factors bit for bit the host code's (fp8_common.cuh's
// rounding and scale). Quantize: one thread block per group, a NaN-propagating amax over the group's 128 x D values
// (integer keys, fp8_common.cuh), then the codes; dequantize: one thread per element. Both are memory-bound passes over
// one K or V block: small beside the attention calls that read the result.
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
  kv_quantize_kernel<<<grid, kQuantizeThreads, 0, stream>>>(xp, codes.ptr<uint8_t>(), factors.ptr<float>(), n, Hkv,
                                                            D, nb);
  CUDA_CHECK_LAUNCH();
}

void kv_fp8_dequantize(Tensor out, const Tensor& codes, const Tensor& factors) {
  const char* op = "kv_fp8_dequantize";
  cudaStream_t stream = stream_for(out, op);
  const FloatPtr o = float_arg(out, out.device, op, "out");
  const int64_t n = out.size(1), Hkv = out.size(2), D = out.size(3), total = out.numel();
  if (total == 0) return;
  kv_dequantize_kernel<<<grid_for(total), kThreads, 0, stream>>>(o, codes.ptr<const uint8_t>(),
                                                                 factors.ptr<const float>(), total, n, Hkv, D,
                                                                 kv_fp8_row_blocks(n));
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
