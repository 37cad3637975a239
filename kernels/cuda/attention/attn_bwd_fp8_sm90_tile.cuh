// The per-tile device pieces of the FP8 attention backward (attn_bwd_fp8_sm90.cu) on one (128 queries x 128 keys)
// tile of a CTA's key block. A warpgroup owns 64 keys; thread (warp w, lane 4g + t) of warpgroup wg holds key rows
// krow = 64 wg + 16 w + g and krow + 8 of the tile. The tile is worked in two halves of 64 queries:
//   S^T, dP^T of a half (64 keys x 64 queries, bf16 wgmma, issue_bf16_half), P^T (probs_half), P' = e4m3(448 P^T)
//   and dS' = e4m3(dS^T s) packed as E4M3 A fragments (pack_e4m3_half), dS^T (dscores_half), the dS bytes stored
//   transposed into the (128 queries, 128 keys) sw128 e4m3 tile (store_ds_half); then the FP8 products:
//   dV per half (issue_rs_quarter: 64 keys x 64 columns of D over 64 queries), dK (issue_rs_half: 64 keys x 64
//   columns of D over 128 queries), dQ (issue_dq: 64 queries x 128 over 128 keys).
// Accumulator layout of a 64-row wgmma: x[nt*4 + 2r + e] = (row 16 w + g + 8 r, column nt*8 + 2t + e).
// E4M3 A fragment (m64 x k32, attn_sm90_wgmma_fp8_ops.cuh): f[4kk + 2 half + r] packs the accumulator's columns
// {2t, 2t+1, 8+2t, 9+2t} + 16 half + 32 kk of row r, which the wgmma reads as k = 4t..4t+3 (+ 16 half): so the B
// tiles of the register products (Q^T, dO^T) hold their queries in that order (attn_fp8_vt_key_of_column).
// Keep C++17; sm_90a only (callers guard with RT_WGMMA_AVAILABLE).
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_fp8_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/fp8_common.cuh"

namespace rt {
namespace cuda {
namespace fp8bwd {

constexpr int kKeys = 128;     // keys per CTA (2 warpgroups x 64)
constexpr int kQueries = 128;  // queries per tile (one scale group), worked in two halves
constexpr int kHalf = 64;
constexpr int kD = 128;
constexpr uint32_t kBf16TileBytes = 128 * 128 * 2;  // (128 rows, 128) bf16 sw128: 2 column blocks of 16 KB
constexpr uint32_t kBf16BlockBytes = 128 * 128;     // one column block (128 rows, 64 bf16)
constexpr uint32_t kFp8TileBytes = 128 * 128;       // (128 rows, 128) e4m3 sw128
constexpr float kPScale = 448.f;                    // kAttnFp8PScale

// d (64 x 64 f32 per warpgroup, 32 per thread) = (accumulate ? d : 0) + A B^T: A (64 x 32 e4m3) in registers (the
// E4M3 A fragment), B^T's rows (64 x 32 e4m3) K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n64k32_rs_e4m3(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                                        uint32_t a3, uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      RT_WGMMA_D32_REGS
      "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : RT_WGMMA_D32_OUT(d)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b_desc), "r"(accumulate));
}

// A 1-D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into shared memory
// at `dst`, completing on the mbarrier `bar` (announce the bytes first with mbar_arrive_expect_tx).
__device__ __forceinline__ void bulk_load_1d(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// x (64 keys x 64 queries per warpgroup) = A_wg B_h^T over D = 128 (8 k16 steps, bf16): a_wg is this warpgroup's
// first row of the (128 keys, 128) K or V tile, b_h the half's first row of the (128 queries, 128) Q or dO tile; both
// bf16 sw128 tiles of 2 column blocks of (128 rows, 64) 16 KB apart, so a k16 step moves 32 bytes inside a block.
__device__ __forceinline__ void issue_bf16_half(float (&x)[32], uint32_t a_wg, uint32_t b_h) {
  const uint64_t a0 = sw128_desc(opaque_u32(a_wg), 16, 1024), b0 = sw128_desc(opaque_u32(b_h), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t off = uint64_t(((kk / 4) * kBf16BlockBytes + (kk % 4) * 32) >> 4);
    wgmma_m64n64k16_ss(x, a0 + off, b0 + off, kk > 0 ? 1 : 0);
  }
}

// P^T = exp2(S^T scale2 - lse log2 e) in place of s (keys krow + 8r, queries q_half + nt*8 + 2t + e of the tile):
// lse_h the half's 64 lse values in shared memory. diag: the tile on the causal diagonal (its first query and first
// key at one position): the pair is visible iff key <= query, else P = 0.
__device__ __forceinline__ void probs_half(float (&s)[32], const float* lse_h, float scale2, bool diag, int krow,
                                           int q_half, int t) {
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse_h + nt * 8 + 2 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = i & 1, r = i >> 1;
      const float lse = e ? l2.y : l2.x;
      const float lse2 = lse == -INFINITY ? INFINITY : lse * kLog2e;  // no visible key: P = 0
      float p = fast_exp2(fmaf(s[nt * 4 + i], scale2, -lse2));
      if (diag && krow + 8 * r > q_half + nt * 8 + 2 * t + e) p = 0.f;
      s[nt * 4 + i] = p;
    }
  }
}

// dS^T = P^T (dP^T - delta) scale in place of dp (the CPU op's order of operations), and the NaN-propagating amax
// key of this thread's values joined into `key`. delta_h: the half's 64 delta values in shared memory.
__device__ __forceinline__ void dscores_half(float (&dp)[32], const float (&s)[32], const float* delta_h, float scale,
                                             uint32_t& key, int t) {
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt) {
    const float2 dl = *reinterpret_cast<const float2*>(delta_h + nt * 8 + 2 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float v = s[nt * 4 + i] * (dp[nt * 4 + i] - ((i & 1) ? dl.y : dl.x)) * scale;
      dp[nt * 4 + i] = v;
      key = max(key, amax_key(v));
    }
  }
}

// x (a half's 64 keys x 64 queries, accumulator layout) times m into E4M3 A fragments f (2 k32 steps; layout above).
__device__ __forceinline__ void pack_e4m3_half(const float (&x)[32], float m, uint32_t (&f)[8]) {
#pragma unroll
  for (int kk = 0; kk < kHalf / 32; ++kk)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int nt = 4 * kk + 2 * half;
        f[4 * kk + 2 * half + r] = cvt_e4m3x4(x[nt * 4 + 2 * r] * m, x[nt * 4 + 2 * r + 1] * m,
                                              x[(nt + 1) * 4 + 2 * r] * m, x[(nt + 1) * 4 + 2 * r + 1] * m);
      }
}

// The byte offset of (query row q, key column k) in the (128 queries, 128 keys) sw128 e4m3 dS tile.
__device__ __forceinline__ uint32_t ds_tile_offset(int q, int k) {
  return uint32_t(q * 128 + ((((k >> 4) ^ q) & 7) << 4) + (k & 15));
}

// Stores the dS codes of a half (fragments f of pack_e4m3_half: keys krow + 8r, queries q_half + nt*8 + 2t + e) into
// the dS tile (generic-proxy byte stores; fence them to the async proxy before the wgmma that reads them).
__device__ __forceinline__ void store_ds_half(uint8_t* ds_tile, const uint32_t (&f)[8], int krow, int q_half, int t) {
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t word = f[4 * (nt / 4) + 2 * ((nt % 4) / 2) + r];
        const int byte = (nt % 2) * 2 + e;
        ds_tile[ds_tile_offset(q_half + nt * 8 + 2 * t + e, krow + 8 * r)] = uint8_t(word >> (8 * byte));
      }
}

// tmp (64 keys x 64 columns of D per warpgroup) = A B^T over 64 queries of the tile (2 k32 steps): A = f (the
// queries' E4M3 A fragments), bt_rows the first of the 64 D rows of a (128 D, 128 queries) sw128 e4m3 tile (Q^T or
// dO^T, the queries in the fragments' order), q_first the first of the 64 queries (0 or 64: a byte offset in the row).
__device__ __forceinline__ void issue_rs_quarter(float (&tmp)[32], const uint32_t (&f)[8], uint32_t bt_rows,
                                                 int q_first) {
  const uint64_t b0 = sw128_desc(opaque_u32(bt_rows), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kHalf / 32; ++kk)
    wgmma_m64n64k32_rs_e4m3(tmp, f[4 * kk], f[4 * kk + 1], f[4 * kk + 2], f[4 * kk + 3],
                            b0 + uint64_t((q_first + kk * 32) >> 4), kk > 0 ? 1 : 0);
}

// tmp (64 keys x 64 columns of D per warpgroup) = A B^T over the tile's 128 queries (4 k32 steps): A = f0 (queries
// 0..63) then f1 (64..127), bt_rows as in issue_rs_quarter.
__device__ __forceinline__ void issue_rs_half(float (&tmp)[32], const uint32_t (&f0)[8], const uint32_t (&f1)[8],
                                              uint32_t bt_rows) {
  const uint64_t b0 = sw128_desc(opaque_u32(bt_rows), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kQueries / 32; ++kk) {
    const uint32_t(&f)[8] = kk < 2 ? f0 : f1;
    const int j = 4 * (kk % 2);
    wgmma_m64n64k32_rs_e4m3(tmp, f[j], f[j + 1], f[j + 2], f[j + 3], b0 + uint64_t((kk * 32) >> 4), kk > 0 ? 1 : 0);
  }
}

// dq (64 queries x 128 per warpgroup) = dS K over the tile's 128 keys (4 k32 steps): ds_rows the warpgroup's first
// row of the (128 queries, 128 keys) dS tile, kt_tile the (128 D, 128 keys) K^T tile, both sw128 e4m3.
__device__ __forceinline__ void issue_dq(float (&dq)[64], uint32_t ds_rows, uint32_t kt_tile) {
  const uint64_t a0 = sw128_desc(opaque_u32(ds_rows), 16, 1024), b0 = sw128_desc(opaque_u32(kt_tile), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kKeys / 32; ++kk)
    wgmma_m64n128k32_ss_e4m3(dq, a0 + uint64_t((kk * 32) >> 4), b0 + uint64_t((kk * 32) >> 4), kk > 0 ? 1 : 0);
}

// acc[32 part + i] += f x tmp[i]: a temp accumulator (64 rows x 64 columns) folded into columns 64 part .. of a
// (64 rows x 128) accumulator (the same layout: column block nt of tmp is column block 8 part + nt of acc).
__device__ __forceinline__ void fold_half(float (&acc)[64], const float (&tmp)[32], int part, float f) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    if (part == 0) acc[i] = fmaf(f, tmp[i], acc[i]);
    else acc[32 + i] = fmaf(f, tmp[i], acc[32 + i]);
  }
}

}  // namespace fp8bwd
}  // namespace cuda
}  // namespace rt
