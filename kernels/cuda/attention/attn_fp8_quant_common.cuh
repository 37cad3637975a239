// Device pieces shared by the FP8 attention quantizers (attn_fwd_fp8_quant.cu, attn_bwd_fp8_quant.cu; issue 47): one
// CTA of 256 threads per (128 rows, D = 128) bf16 group, each thread holding 8 chunks of 8 values in registers
// between the amax and the codes (chunk c = thread + 256 j: row c / 16, columns (c % 16) * 8 .. + 8); the CTA's
// NaN-propagating amax (fp8_common.cuh's keys); and the codes written transposed, (D, 128) through a swizzled shared
// tile, to a (.., D, N) output. Keep C++17.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attn_fwd_fp8.h"  // attn_fp8_vt_column_of_key
#include "kernels/cuda/fp8_common.cuh"

namespace rt {
namespace cuda {
namespace attn_fp8_quant {

constexpr int kThreads = 256;
constexpr int kRows = 128;  // rows of a scale group: kAttnFp8FwdBlock, kAttnFp8BwdBlock
constexpr int kD = 128;
constexpr int kChunks = kRows * kD / 8 / kThreads;  // 8 chunks of 8 values a thread

// The 8 bf16 values of chunk j of this thread, from the (128, D) group whose row r starts at base + r * row_stride.
__device__ __forceinline__ void load_group(const __nv_bfloat16* base, int64_t row_stride, uint4 (&raw)[kChunks]) {
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int c = int(threadIdx.x) + kThreads * j, row = c / 16, col = (c % 16) * 8;
    raw[j] = *reinterpret_cast<const uint4*>(base + int64_t(row) * row_stride + col);
  }
}

// 8 bf16 (one 16-byte chunk) as floats.
__device__ __forceinline__ void unpack_bf16x8(const uint4& u, float (&v)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

// The NaN-propagating amax key (fp8_common.cuh amax_key) over this thread's chunks.
__device__ __forceinline__ uint32_t thread_amax_key(const uint4 (&raw)[kChunks]) {
  uint32_t k = 0;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    float v[8];
    unpack_bf16x8(raw[j], v);
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
  for (int w = 0; w < kThreads / 32; ++w) m = max(m, red[w]);
  return m;
}

// The byte offset of (row d, column col) in the shared (D, 128) transposed tile: the 16-byte chunk of the column
// XORed with bits 3..5 of d, so that the 16 d's of a warp's byte stores (d0 + 8 m) fall in 8 bank groups, not one.
__device__ __forceinline__ int transposed_tile_offset(int d, int col) {
  return d * kRows + ((((col >> 4) ^ (d >> 3)) & 7) << 4) + (col & 15);
}

// The codes of this thread's chunks times s, transposed: row r of the group goes to column
// attn_fp8_vt_column_of_key(r) when `permute` (the order of the kernels' register fragments), else column r, of the
// (D, 128) block whose row d starts at out + d * N. tile: kD * kRows bytes of shared memory, 16-byte aligned.
__device__ __forceinline__ void store_codes_transposed(const uint4 (&raw)[kChunks], float s, bool permute,
                                                       uint8_t* tile, uint8_t* out, int64_t N) {
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int c = int(threadIdx.x) + kThreads * j, row = c / 16, d0 = (c % 16) * 8;
    const int col = permute ? int(attn_fp8_vt_column_of_key(row)) : row;
    float v[8];
    unpack_bf16x8(raw[j], v);
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const uint32_t two = e4m3x2_bits(v[i] * s, v[i + 1] * s);
      tile[transposed_tile_offset(d0 + i, col)] = uint8_t(two & 0xFFu);
      tile[transposed_tile_offset(d0 + i + 1, col)] = uint8_t(two >> 8);
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kD * kRows / 16 / kThreads; ++j) {
    const int c = int(threadIdx.x) + kThreads * j, d = c / 8, cc = c % 8;
    *reinterpret_cast<uint4*>(out + int64_t(d) * N + cc * 16) =
        *reinterpret_cast<const uint4*>(tile + transposed_tile_offset(d, cc * 16));
  }
}

}  // namespace attn_fp8_quant
}  // namespace cuda
}  // namespace rt
