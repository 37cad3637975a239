// attn_fwd_fp8_quantize on CUDA (kernels/attn_fwd_fp8.h has the layouts): bf16 Q, K, V into the E4M3 codes and f32
// factors of the FP8 attention forward, with kernels/fp8.h's rounding (fp8_common.cuh: the same arithmetic as the
// host rule, bit for bit; tests/gpu/test_cuda_attn_fwd_fp8.cpp checks it).
//   pass 1 (v_block_amax_kernel): one CTA per (128-key block, K/V head, sample): the block's V amax;
//   pass 2 (quantize_kernel): one CTA per (128-row block, head, sample) over H query heads then Hkv K/V heads: a Q
//     block (amax, codes, factor), or a K block (likewise) and the same rows of V, transposed through shared memory
//     with the head's factor (the max of pass 1's block amaxes).
// A group is 128 rows x D = 128 columns: 256 threads, each holding 8 chunks of 8 values in registers between the
// amax and the codes (chunk c = thread + 256 j: row c / 16, columns (c % 16) * 8 .. + 8). Keep C++17.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention/attn_fwd_fp8_launch.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace {

constexpr int kQuantThreads = 256;
constexpr int kRowsPerBlock = 128;  // kAttnFp8FwdBlock
constexpr int kD = 128;
constexpr int kChunksPerThread = kRowsPerBlock * kD / 8 / kQuantThreads;  // 8

// The 8 bf16 values of chunk j of this thread, from the (rows, D) group whose row r starts at base + r * row_stride.
__device__ __forceinline__ void load_group(const __nv_bfloat16* base, int64_t row_stride, uint4 (&raw)[kChunksPerThread]) {
#pragma unroll
  for (int j = 0; j < kChunksPerThread; ++j) {
    const int c = int(threadIdx.x) + kQuantThreads * j, row = c / 16, col = (c % 16) * 8;
    raw[j] = *reinterpret_cast<const uint4*>(base + int64_t(row) * row_stride + col);
  }
}

__device__ __forceinline__ void unpack8(const uint4& u, float (&v)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

// The NaN-propagating amax key (fp8_common.cuh amax_key) over this thread's chunks.
__device__ __forceinline__ uint32_t thread_amax_key(const uint4 (&raw)[kChunksPerThread]) {
  uint32_t k = 0;
#pragma unroll
  for (int j = 0; j < kChunksPerThread; ++j) {
    float v[8];
    unpack8(raw[j], v);
#pragma unroll
    for (int i = 0; i < 8; ++i) k = max(k, amax_key(v[i]));
  }
  return k;
}

// The CTA's max of every thread's key (all threads call it; `red` holds 8 words of shared memory).
__device__ __forceinline__ uint32_t cta_max_key(uint32_t k, uint32_t* red) {
  k = warp_max_key(k);
  __syncthreads();  // red may still be read from a previous call
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = k;
  __syncthreads();
  uint32_t m = 0;
#pragma unroll
  for (int w = 0; w < kQuantThreads / 32; ++w) m = max(m, red[w]);
  return m;
}

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
  uint4 raw[kChunksPerThread];
  load_group(x, row_stride, raw);
  const float s = fp8_scale_of(amax_of_key(cta_max_key(thread_amax_key(raw), red)));
#pragma unroll
  for (int j = 0; j < kChunksPerThread; ++j) {
    const int c = int(threadIdx.x) + kQuantThreads * j, row = c / 16, col = (c % 16) * 8;
    float v[8];
    unpack8(raw[j], v);
    *reinterpret_cast<uint2*>(codes + int64_t(row) * row_stride + col) = codes8(v, s);
  }
  if (threadIdx.x == 0) *factor = fp8_factor_of(s);
}

// Pass 1: v_block_amax (B,Hkv,nblk) from v (B,N,Hkv,D). Grid (nblk, Hkv, B).
__global__ void __launch_bounds__(kQuantThreads) v_block_amax_kernel(const __nv_bfloat16* v, float* v_block_amax,
                                                                     int64_t N, int64_t Hkv) {
  __shared__ uint32_t red[kQuantThreads / 32];
  const int64_t blk = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, nblk = gridDim.x;
  uint4 raw[kChunksPerThread];
  load_group(v + ((b * N + blk * kRowsPerBlock) * Hkv + hk) * kD, Hkv * kD, raw);
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

// The byte offset of (row d, column col) in the (D, 128) transposed tile: the 16-byte chunk of the column XORed with
// bits 3..5 of d, so that the 16 d's of a warp's store (d0 + 8 m) fall in 8 different bank groups, not one.
__device__ __forceinline__ int vt_tile_offset(int d, int col) {
  return d * kRowsPerBlock + ((((col >> 4) ^ (d >> 3)) & 7) << 4) + (col & 15);
}

// Pass 2. Grid (nblk, H + Hkv, B).
__global__ void __launch_bounds__(kQuantThreads) quantize_kernel(const QuantArgs a) {
  __shared__ uint32_t red[kQuantThreads / 32];
  __shared__ __align__(16) uint8_t vt_tile[kD * kRowsPerBlock];  // (D, 128 keys) codes, vt_tile_offset's order
  const int64_t blk = blockIdx.x, y = blockIdx.y, b = blockIdx.z, nblk = gridDim.x;
  const int64_t row0 = b * a.N + blk * kRowsPerBlock;  // (B,N) row of the group's first row
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
  for (int64_t i = threadIdx.x; i < nblk; i += kQuantThreads) key = max(key, amax_key(bam[i]));
  const float s = fp8_scale_of(amax_of_key(cta_max_key(key, red)));
  uint4 raw[kChunksPerThread];
  load_group(a.v + off, a.Hkv * kD, raw);
#pragma unroll
  for (int j = 0; j < kChunksPerThread; ++j) {
    const int c = int(threadIdx.x) + kQuantThreads * j, kl = c / 16, d0 = (c % 16) * 8;
    const int col = int(attn_fp8_vt_column_of_key(kl));
    float v[8];
    unpack8(raw[j], v);
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const uint32_t two = e4m3x2_bits(v[i] * s, v[i + 1] * s);
      vt_tile[vt_tile_offset(d0 + i, col)] = uint8_t(two & 0xFFu);
      vt_tile[vt_tile_offset(d0 + i + 1, col)] = uint8_t(two >> 8);
    }
  }
  __syncthreads();
  uint8_t* vt = a.vt_codes + (b * a.Hkv + hk) * kD * a.N + blk * kRowsPerBlock;  // row d at vt + d * N
#pragma unroll
  for (int j = 0; j < kD * kRowsPerBlock / 16 / kQuantThreads; ++j) {
    const int c = int(threadIdx.x) + kQuantThreads * j, d = c / 8, cc = c % 8;
    *reinterpret_cast<uint4*>(vt + int64_t(d) * a.N + cc * 16) =
        *reinterpret_cast<const uint4*>(vt_tile + vt_tile_offset(d, cc * 16));
  }
  if (blk == 0 && threadIdx.x == 0) a.v_factor[b * a.Hkv + hk] = fp8_factor_of(s);
}

}  // namespace

void launch_attn_fwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& v, const AttnFp8FwdCodes& codes,
                                  const AttnFp8FwdDims& dims) {
  cudaStream_t stream = stream_for(q, "attn_fwd_fp8_quantize");
  RT_CHECK(dims.D == kD && dims.N % kRowsPerBlock == 0,
           "attn_fwd_fp8_quantize: D = " << dims.D << ", N = " << dims.N << "; the kernel takes D = 128 and N % 128 == 0");
  const int64_t nblk = dims.N / kRowsPerBlock;
  RT_CHECK(nblk <= 0x7FFFFFFF && dims.H + dims.Hkv <= 65535 && dims.B <= 65535,
           "attn_fwd_fp8_quantize: grid too large (N / 128 = " << nblk << ", H + Hkv = " << dims.H + dims.Hkv
                                                               << ", B = " << dims.B << ")");
  if (dims.B == 0 || nblk == 0) return;
  v_block_amax_kernel<<<dim3(unsigned(nblk), unsigned(dims.Hkv), unsigned(dims.B)), kQuantThreads, 0, stream>>>(
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
  quantize_kernel<<<dim3(unsigned(nblk), unsigned(dims.H + dims.Hkv), unsigned(dims.B)), kQuantThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
