// attn_fwd_fp8_quantize on CUDA (kernels/attn_fwd_fp8.h has the layouts): bf16 Q, K, V into the E4M3 codes and f32
// factors of the FP8 attention forward, with kernels/fp8.h's rounding (fp8_common.cuh: the same arithmetic as the
// host rule, bit for bit; tests/gpu/test_cuda_attn_fwd_fp8.cpp checks it).
//   pass 1 (v_block_amax_kernel): one CTA per (128-key block, K/V head, sample): the block's V amax;
//   pass 2 (quantize_kernel): one CTA per (128-row block, head, sample) over H query heads then Hkv K/V heads: a Q
//     block (amax, codes, factor), or a K block (likewise) and the same rows of V, transposed through shared memory
//     with the head's factor (the max of pass 1's block amaxes).
// A group is 128 rows x D = 128 columns: 256 threads, each holding 8 chunks of 8 values in registers between the
// amax and the codes (attn_fp8_quant_common.cuh, shared with the backward's quantizer). Keep C++17.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention/attn_fwd_fp8_launch.h"
#include "kernels/cuda/attention/attn_fp8_quant_common.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace {

using namespace attn_fp8_quant;  // kThreads, kRows (kAttnFp8FwdBlock), kD, kChunks; the group's load and amax

// Codes of 8 values x s, packed little-endian (column order).
__device__ __forceinline__ uint2 codes8(const float (&v)[8], float s) {
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = e4m3x2_bits(v[4 * h] * s, v[4 * h + 1] * s);
    const uint32_t hi = e4m3x2_bits(v[4 * h + 2] * s, v[4 * h + 3] * s);
    w[h] = lo | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

// One (128, D) row group: amax, codes (at codes_base + r * row_stride, the same strides as the input) and factor.
__device__ __forceinline__ void quantize_rows(const __nv_bfloat16* x, uint8_t* codes, int64_t row_stride,
                                              float* factor, uint32_t* red) {
  uint4 raw[kChunks];
  load_group(x, row_stride, raw);
  const float s = fp8_scale_of(amax_of_key(cta_max_key(thread_amax_key(raw), red)));
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int c = int(threadIdx.x) + kThreads * j, row = c / 16, col = (c % 16) * 8;
    float v[8];
    unpack_bf16x8(raw[j], v);
    *reinterpret_cast<uint2*>(codes + int64_t(row) * row_stride + col) = codes8(v, s);
  }
  if (threadIdx.x == 0) *factor = fp8_factor_of(s);
}

// Pass 1: v_block_amax (B,Hkv,nblk) from v (B,N,Hkv,D). Grid (nblk, Hkv, B).
__global__ void __launch_bounds__(kThreads) v_block_amax_kernel(const __nv_bfloat16* v, float* v_block_amax,
                                                                int64_t N, int64_t Hkv) {
  __shared__ uint32_t red[kThreads / 32];
  const int64_t blk = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, nblk = gridDim.x;
  uint4 raw[kChunks];
  load_group(v + ((b * N + blk * kRows) * Hkv + hk) * kD, Hkv * kD, raw);
  const uint32_t k = cta_max_key(thread_amax_key(raw), red);
  if (threadIdx.x == 0) v_block_amax[(b * Hkv + hk) * nblk + blk] = amax_of_key(k);
}

struct QuantArgs {
  const __nv_bfloat16* q;  // (B,N,H,D)
  const __nv_bfloat16* k;  // (B,N,Hkv,D)
  const __nv_bfloat16* v;  // (B,N,Hkv,D)
  uint8_t* q_codes;        // (B,N,H,D)
  float* q_factor;         // (B,H,nblk)
  uint8_t* k_codes;        // (B,N,Hkv,D)
  float* k_factor;         // (B,Hkv,nblk)
  uint8_t* vt_codes;       // (B,Hkv,D,N), keys permuted per 16 (attn_fp8_vt_column_of_key)
  float* v_factor;         // (B,Hkv)
  const float* v_block_amax;  // (B,Hkv,nblk)
  int64_t N, H, Hkv;
};

// Pass 2. Grid (nblk, H + Hkv, B).
__global__ void __launch_bounds__(kThreads) quantize_kernel(const QuantArgs a) {
  __shared__ uint32_t red[kThreads / 32];
  __shared__ __align__(16) uint8_t vt_tile[kD * kRows];  // (D, 128 keys) codes, swizzled
  const int64_t blk = blockIdx.x, y = blockIdx.y, b = blockIdx.z, nblk = gridDim.x;
  const int64_t row0 = b * a.N + blk * kRows;  // (B,N) row of the group's first row
  if (y < a.H) {
    const int64_t off = (row0 * a.H + y) * kD;
    quantize_rows(a.q + off, a.q_codes + off, a.H * kD, a.q_factor + (b * a.H + y) * nblk + blk, red);
    return;
  }
  const int64_t hk = y - a.H;
  const int64_t off = (row0 * a.Hkv + hk) * kD;
  quantize_rows(a.k + off, a.k_codes + off, a.Hkv * kD, a.k_factor + (b * a.Hkv + hk) * nblk + blk, red);

  // V: the head's amax over pass 1's blocks, then this block's rows transposed.
  uint32_t key = 0;
  const float* bam = a.v_block_amax + (b * a.Hkv + hk) * nblk;  // (nblk)
  for (int64_t i = threadIdx.x; i < nblk; i += kThreads) key = max(key, amax_key(bam[i]));
  const float s = fp8_scale_of(amax_of_key(cta_max_key(key, red)));
  uint4 raw[kChunks];
  load_group(a.v + off, a.Hkv * kD, raw);
  uint8_t* vt = a.vt_codes + (b * a.Hkv + hk) * kD * a.N + blk * kRows;  // row d at vt + d * N
  store_codes_transposed(raw, s, /*permute=*/true, vt_tile, vt, a.N);
  if (blk == 0 && threadIdx.x == 0) a.v_factor[b * a.Hkv + hk] = fp8_factor_of(s);
}

}  // namespace

void launch_attn_fwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& v, const AttnFp8FwdCodes& codes,
                                  const AttnFp8FwdDims& dims) {
  cudaStream_t stream = stream_for(q, "attn_fwd_fp8_quantize");
  RT_CHECK(dims.D == kD && dims.N % kRows == 0,
           "attn_fwd_fp8_quantize: D = " << dims.D << ", N = " << dims.N << "; the kernel takes D = 128 and N % 128 == 0");
  const int64_t nblk = dims.N / kRows;
  RT_CHECK(nblk <= 0x7FFFFFFF && dims.H + dims.Hkv <= 65535 && dims.B <= 65535,
           "attn_fwd_fp8_quantize: grid too large (N / 128 = " << nblk << ", H + Hkv = " << dims.H + dims.Hkv
                                                               << ", B = " << dims.B << ")");
  if (dims.B == 0 || nblk == 0) return;
  v_block_amax_kernel<<<dim3(unsigned(nblk), unsigned(dims.Hkv), unsigned(dims.B)), kThreads, 0, stream>>>(
      v.ptr<const __nv_bfloat16>(), codes.v_block_amax.ptr<float>(), dims.N, dims.Hkv);
  CUDA_CHECK_LAUNCH();
  QuantArgs a;
  a.q = q.ptr<const __nv_bfloat16>();
  a.k = k.ptr<const __nv_bfloat16>();
  a.v = v.ptr<const __nv_bfloat16>();
  a.q_codes = codes.q.ptr<uint8_t>();
  a.q_factor = codes.q_factor.ptr<float>();
  a.k_codes = codes.k.ptr<uint8_t>();
  a.k_factor = codes.k_factor.ptr<float>();
  a.vt_codes = codes.vt.ptr<uint8_t>();
  a.v_factor = codes.v_factor.ptr<float>();
  a.v_block_amax = codes.v_block_amax.ptr<const float>();
  a.N = dims.N, a.H = dims.H, a.Hkv = dims.Hkv;
  quantize_kernel<<<dim3(unsigned(nblk), unsigned(dims.H + dims.Hkv), unsigned(dims.B)), kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
