// The layout and per-tile device pieces of the FP8 attention backward on Hopper (attn_bwd_fp8_sm90.cu, whose head
// comment has the design: operands, scales, structure, shared memory, wait points): the tile sizes, the shared-memory
// map and named barrier ids, the kernel's Params, the E4M3 wgmma wrappers and the bf16 / FP8 products of a half tile,
// the E4M3 packing and the dS byte stores, the block mask (query_tiles_of, tile_masked), P^T and dS^T of a half tile,
// and the dQ part's staging and TMA reduce. Included by attn_bwd_fp8_sm90.cu only: everything is in its anonymous
// namespace (the kernel's symbol and its PTX unchanged by the split). Keep C++17.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_fp8_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/fp8_common.cuh"

namespace rt {
namespace cuda {
namespace fp8bwd {
namespace {

constexpr int kFp8BwdThreads = 256;  // 2 warpgroups x 64 keys
constexpr int kKeys = 128;     // keys per CTA
constexpr int kQueries = 128;  // queries per tile (one scale group), worked in two halves
constexpr int kHalf = 64;
constexpr int kD = 128;
constexpr uint32_t kBf16TileBytes = 128 * 128 * 2;  // (128 rows, 128) bf16 sw128: 2 column blocks of 16 KB
constexpr uint32_t kBf16BlockBytes = 128 * 128;     // one column block (128 rows, 64 bf16)
constexpr uint32_t kFp8TileBytes = 128 * 128;       // (128 rows, 128) e4m3 sw128
constexpr float kPScale = 448.f;                    // kAttnFp8PScale

// Shared memory, from a 1024-byte aligned base.
constexpr uint32_t kSmK = 0;                                // (128 keys, 128) bf16 sw128
constexpr uint32_t kSmV = kSmK + kBf16TileBytes;            // (128 keys, 128) bf16 sw128
constexpr uint32_t kSmQ = kSmV + kBf16TileBytes;            // (128 queries, 128) bf16 sw128
constexpr uint32_t kSmDo = kSmQ + kBf16TileBytes;           // (128 queries, 128) bf16 sw128
constexpr uint32_t kSmKt = kSmDo + kBf16TileBytes;          // (128 D, 128 keys) e4m3 sw128
constexpr uint32_t kSmQt = kSmKt + kFp8TileBytes;           // (128 D, 128 queries) e4m3 sw128, permuted per 16
constexpr uint32_t kSmDot = kSmQt + kFp8TileBytes;          // (128 D, 128 queries) e4m3 sw128, permuted per 16
constexpr uint32_t kSmDs = kSmDot + kFp8TileBytes;          // (128 queries, 128 keys) e4m3 sw128
constexpr uint32_t kSmStage = kSmDs + kFp8TileBytes;        // (2 warpgroups, 8, 128 threads) float4: half 0's dS^T
constexpr uint32_t kSmLse = kSmStage + 8 * kFp8BwdThreads * 16;   // (128) f32
constexpr uint32_t kSmDelta = kSmLse + kQueries * 4;        // (128) f32
constexpr uint32_t kSmBars = kSmDelta + kQueries * 4;       // mbarriers: kv, q (bf16 + stats), t (Q^T, dO^T), free
constexpr uint32_t kSmRed = kSmBars + 32;                   // (8 warps) u32 amax keys
constexpr size_t kSmemBytes = size_t(kSmRed) + 32 + 1024;  // + alignment slack
static_assert(kSmemBytes <= 232448, "attn_bwd_fp8: shared memory over the sm_90 opt-in limit (227 KB)");

constexpr uint32_t kDqPartBytes = 64 * 64 * 4;  // (64 queries, 64 columns) f32 of a warpgroup: 2 boxes of 8 KB
static_assert(kDqPartBytes * 2 == 8 * kFp8BwdThreads * 16, "the staging area holds both warpgroups' dQ part 1");
static_assert(kDqPartBytes == kFp8TileBytes, "a Q^T / dO^T tile holds one warpgroup's dQ part 0");
static_assert(kSmStage % 1024 == 0 && kSmQt % 1024 == 0 && kSmDot % 1024 == 0, "sw128 boxes need 1 KB alignment");

// Named barriers (id 0 is __syncthreads): per warpgroup wg, dQ part 0 handed to the issuing thread (1 + wg), part 1
// (3 + wg), the staging free again in the next tile (5 + wg). Distinct ids: warps that only arrive cannot run into
// the next use of the same barrier.
constexpr int kBarDqPart0 = 1, kBarDqPart1 = 3, kBarStageFree = 5;

struct Params {
  const float* lse;        // (B,H,Nq)
  const float* delta;      // (B,H,Nq)
  const float* q_factor;   // (B,H,nblk)
  const float* do_factor;  // (B,H,nblk)
  const float* k_factor;   // (B,Hkv,nblk_k)
  float* dk;               // (B,Nk,Hkv,D) accumulated
  float* dv;               // (B,Nk,Hkv,D) accumulated (dq_acc (B,Nq,H,D): the kernel's dq_map)
  int64_t N, H, Hkv, group;  // N: query rows (Nq)
  int nblk;                  // query tiles Nq / 128
  bool causal;
  // Key rows Nk (nblk_k tiles); only query rows [q_begin, q_end) x key rows [k_begin, k_end) take part; causal: key
  // j visible to query i iff j <= i + shift (shift = q_offset - k_offset, clamped to [-2^30, 2^30]: the same pairs
  // for rows below 2^30, and key - shift, query + shift stay in int).
  int64_t Nk;
  int nblk_k;
  int shift, q_begin, q_end, k_begin, k_end;
  float scale;     // 1 / sqrt(D)
  float scale2;    // scale x log2(e)
  float p_factor;  // fp8_factor_from_scale(448): P's factor
};

// ---- the tile's pieces. A warpgroup owns 64 keys; thread (warp w, lane 4g + t) of warpgroup wg holds key rows
//      krow = 64 wg + 16 w + g and krow + 8 of the tile. Accumulator layout of a 64-row wgmma: x[nt*4 + 2r + e] =
//      (row 16 w + g + 8 r, column nt*8 + 2t + e). E4M3 A fragment (m64 x k32, attn_sm90_wgmma_fp8_ops.cuh):
//      f[4kk + 2 half + r] packs the accumulator's columns {2t, 2t+1, 8+2t, 9+2t} + 16 half + 32 kk of row r, which
//      the wgmma reads as k = 4t..4t+3 (+ 16 half): so the B tiles of the register products (Q^T, dO^T) hold their
//      queries in that order (attn_fp8_vt_key_of_column). ----

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

// tmp (64 keys x 64 columns of D per warpgroup) = A B^T over the tile's 128 queries (4 k32 steps): A = f0 (queries
// 0..63) then f1 (64..127), bt_rows the first of 64 D rows of a (128 D, 128 queries) sw128 e4m3 tile (Q^T or dO^T,
// the queries in the fragments' order).
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

// x (64 queries x 64 columns of D per warpgroup) = dS K over the tile's 128 keys (4 k32 steps): ds_rows the
// warpgroup's first row of the (128 queries, 128 keys) dS tile, kt_rows the first of 64 D rows of the (128 D, 128
// keys) K^T tile, both sw128 e4m3.
__device__ __forceinline__ void issue_dq_part(float (&x)[32], uint32_t ds_rows, uint32_t kt_rows) {
  const uint64_t a0 = sw128_desc(opaque_u32(ds_rows), 16, 1024), b0 = sw128_desc(opaque_u32(kt_rows), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kKeys / 32; ++kk)
    wgmma_m64n64k32_ss_e4m3(x, a0 + uint64_t((kk * 32) >> 4), b0 + uint64_t((kk * 32) >> 4), kk > 0 ? 1 : 0);
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

// The dS codes of a half (fragments f of pack_e4m3_half: keys krow + 8r, queries q_half + nt*8 + 2t + e) into the
// (128 queries, 128 keys) sw128 e4m3 dS tile (byte (q, k) at q * 128 + ((k / 16 ^ q) & 7) * 16 + k % 16), as
// generic-proxy byte stores (fence them to the async proxy before the wgmma that reads them). Two addresses per
// thread: its keys krow, krow + 8 share one 16-key chunk (krow >> 4), and its queries have q & 7 = 2t + e, so the
// swizzled chunk depends on e only and every byte is one of two per-thread offsets plus an immediate.
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

// ---- the block mask (Params: ranges [q_begin, q_end) x [k_begin, k_end), causal j <= i + shift; all rows below
//      2^30, so the int arithmetic below does not overflow) ----

// The query tiles [first, end) that key tile kt meets: from the tile of the first query in range that sees the first
// key in range, to the last tile of the query range. Every tile in it has a visible pair (a later tile's last query
// is later still); none (first == end) when the key tile is outside [k_begin, k_end) or no pair is visible. The whole
// sequence: causal [kt, nblk), full [0, nblk).
__device__ __forceinline__ void query_tiles_of(const Params& p, int kt, int& first, int& end) {
  const int k0 = kt * kKeys;
  const int k_lo = max(k0, p.k_begin), k_hi = min(k0 + kKeys, p.k_end);
  const int q_lo = p.causal ? max(p.q_begin, k_lo - p.shift) : p.q_begin;  // the first query that sees key k_lo
  if (k_lo >= k_hi || q_lo >= p.q_end) {
    first = end = 0;
    return;
  }
  first = q_lo / kQueries;
  end = (p.q_end + kQueries - 1) / kQueries;
}

// Whether the (queries q0 .. q0 + 127, keys k0 .. k0 + 127) tile needs the pair-by-pair mask: a range cuts it, or it
// is causal and some key is later than some query (the whole sequence: the diagonal tile only).
__device__ __forceinline__ bool tile_masked(const Params& p, int k0, int q0) {
  return q0 < p.q_begin || q0 + kQueries > p.q_end || k0 < p.k_begin || k0 + kKeys > p.k_end ||
         (p.causal && k0 + kKeys - 1 > q0 + p.shift);
}

// P^T = exp2(S^T scale2 - lse log2 e) in place of s for keys k0 + krow + 8r and queries q0 + q_half + nt*8 + 2t + e
// (lse_h: the half's 64 lse values in shared memory); in a masked tile (tile_masked) a pair outside the ranges or the
// causal rule gets P = 0 (the CPU op's masked pairs).
__device__ __forceinline__ void probs_half_block(float (&s)[32], const float* lse_h, const Params& p, bool masked,
                                                 int q0, int k0, int krow, int q_half, int t) {
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse_h + nt * 8 + 2 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = i & 1, r = i >> 1;
      const float lse = e ? l2.y : l2.x;
      const float lse2 = lse == -INFINITY ? INFINITY : lse * kLog2e;  // no visible key: P = 0
      float pv = fast_exp2(fmaf(s[nt * 4 + i], p.scale2, -lse2));
      if (masked) {  // in the tile's coordinates (query q0 + ql, key k0 + kl): fewer registers live (no spill)
        const int ql = q_half + nt * 8 + 2 * t + e, kl = krow + 8 * r;
        const bool visible = ql >= p.q_begin - q0 && ql < p.q_end - q0 && kl >= p.k_begin - k0 &&
                             kl < p.k_end - k0 && (!p.causal || kl <= ql + (q0 + p.shift - k0));
        if (!visible) pv = 0.f;
      }
      s[nt * 4 + i] = pv;
    }
  }
}

// dS^T = P^T (dP^T - delta) scale in place of dp (the CPU op's order of operations; delta_h: the half's 64 delta
// values in shared memory), and the NaN-propagating amax key of this thread's values joined into `key`; dS = 0
// wherever P = 0: a masked pair gets dS = 0 whatever dP and delta hold (rows and keys outside the ranges may hold
// anything, NaN included; the CPU op writes 0 there), so a masked tile's amax is the CPU op's over its clipped tile.
// Applied in every tile (a select per element; keyed on `masked` it cost 16 bytes more of spill): a visible pair
// whose P underflowed to 0 gets 0 as well, where the CPU op has 0 x (dP - delta), the same value unless dP or delta
// is not finite.
__device__ __forceinline__ void dscores_half_block(float (&dp)[32], const float (&s)[32], const float* delta_h,
                                                   float scale, uint32_t& key, int t) {
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt) {
    const float2 dl = *reinterpret_cast<const float2*>(delta_h + nt * 8 + 2 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = s[nt * 4 + i] * (dp[nt * 4 + i] - ((i & 1) ? dl.y : dl.x)) * scale;
      if (s[nt * 4 + i] == 0.f) v = 0.f;
      dp[nt * 4 + i] = v;
      key = max(key, amax_key(v));
    }
  }
}

// Whether the dK / dV row `key` (of the CTA's key tile) takes part (the key range).
__device__ __forceinline__ bool key_in_range(const Params& p, int key) { return key >= p.k_begin && key < p.k_end; }

// The warpgroup's n64 dQ part x (64 queries x 64 columns, accumulator layout) times f into the 2 sw128 boxes at
// `boxes`, then handed to the issuing thread (warp 0's lane 0), which adds them into dq_acc at (column col0, head h,
// query q0, sample b) as one bulk group. Warps 1-3 arrive and go on; warp 0 waits for them.
__device__ __forceinline__ void dq_part_out(const CUtensorMap* dq_map, uint32_t boxes, const float (&x)[32], float f,
                                            int bar_id, int col0, int h, int q0, int b, int warp, int lane) {
  wgbwd::stage_rows_f32_sw128<8>(boxes, x, f, warp, lane / 4, lane % 4);
  fence_proxy_async();  // this thread's stores, before the async proxy reads them
  if (warp != 0) {
    named_bar_arrive(bar_id, 128);
    return;
  }
  named_bar_sync(bar_id, 128);
  if (lane == 0) {
    tma_reduce_add_4d(dq_map, boxes, col0, h, q0, b);
    tma_reduce_add_4d(dq_map, boxes + kDqPartBytes / 2, col0 + 32, h, q0, b);
    bulk_commit();
  }
  __syncwarp();
}

}  // namespace
}  // namespace fp8bwd
}  // namespace cuda
}  // namespace rt
