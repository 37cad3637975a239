// Device pieces the FP8 attention backward v2 and v3 kernels share (attn_bwd_fp8_sm90_v2.cu, attn_bwd_fp8_sm90_v3.cu;
// the rest of their tile is in attn_bwd_fp8_sm90_tile.cuh): the dQ product from the shared-memory dS tile in n64
// parts of D, and the dS byte stores with two addresses a thread. Same layouts as attn_bwd_fp8_sm90_tile.cuh.
// Keep C++17; sm_90a only (callers guard with RT_WGMMA_AVAILABLE).
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attn_bwd_fp8_sm90_tile.cuh"

namespace rt {
namespace cuda {
namespace fp8bwd {

// d (64 x 64 f32 per warpgroup) = A B^T: A (64 x 32) and B^T's rows (64 x 32) e4m3 in shared memory, K-major.
__device__ __forceinline__ void wgmma_m64n64k32_ss_e4m3(float (&d)[32], uint64_t a_desc, uint64_t b_desc,
                                                        int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      RT_WGMMA_D32_REGS
      "}, %32, %33, p, 1, 1;\n}\n"
      : RT_WGMMA_D32_OUT(d)
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// x (64 queries x 64 columns of D per warpgroup) = dS K over the tile's 128 keys (4 k32 steps): ds_rows the
// warpgroup's first row of the (128 queries, 128 keys) dS tile, kt_rows the first of 64 D rows of the (128 D, 128
// keys) K^T tile, both sw128 e4m3. issue_dq's product, one half of D.
__device__ __forceinline__ void issue_dq_part(float (&x)[32], uint32_t ds_rows, uint32_t kt_rows) {
  const uint64_t a0 = sw128_desc(opaque_u32(ds_rows), 16, 1024), b0 = sw128_desc(opaque_u32(kt_rows), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kKeys / 32; ++kk)
    wgmma_m64n64k32_ss_e4m3(x, a0 + uint64_t((kk * 32) >> 4), b0 + uint64_t((kk * 32) >> 4), kk > 0 ? 1 : 0);
}

// store_ds_half's stores (the dS codes of a half into the (128 queries, 128 keys) sw128 e4m3 dS tile at the same
// bytes) with the addresses reduced to two per thread: the thread's keys krow, krow + 8 share one 16-key chunk
// (krow >> 4), and its queries q_half + 8 nt + 2t + e have q & 7 = 2t + e, so the swizzled chunk depends on e only
// and every byte is one of two per-thread offsets plus a constant (an immediate of the store).
__device__ __forceinline__ void store_ds_half_fast(uint8_t* ds_tile, const uint32_t (&f)[8], int krow, int q_half,
                                                   int t) {
  const int chunk = (krow >> 4) & 7, key_lo = krow & 15;  // krow & 15 < 8: key krow + 8 is in the same chunk
  uint8_t* const row_e[2] = {
      ds_tile + (2 * t) * 128 + (((chunk ^ (2 * t)) & 7) << 4) + key_lo,
      ds_tile + (2 * t + 1) * 128 + (((chunk ^ (2 * t + 1)) & 7) << 4) + key_lo,
  };
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t word = f[4 * (nt / 4) + 2 * ((nt % 4) / 2) + r];
        const int byte = (nt % 2) * 2 + e;
        row_e[e][(q_half + nt * 8) * 128 + 8 * r] = uint8_t(word >> (8 * byte));
      }
}

}  // namespace fp8bwd
}  // namespace cuda
}  // namespace rt
