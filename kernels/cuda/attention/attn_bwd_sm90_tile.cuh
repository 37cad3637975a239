// The per-tile device pieces of the Hopper attention backward kernels (bwd v4 attn_bwd_sm90.cu, bwd v5
// attn_bwd_sm90ws.cu), on one (64 queries x 128 keys) tile of a CTA's key block; a consumer warpgroup owns 64 keys:
//   S^T = K Q^T and dP^T = V dO^T (issue_kq), P^T from the LSE with the tile's mask (compute_pt), dV += P^T dO and
//   dK += dS^T Q from register A fragments (issue_acc, issue_dv_wait_dp), dS^T = P^T (dP^T - delta) formed and
//   stored to shared memory (compute_dst_store; v5: compute_dst_store_stmatrix, with the query statistics in
//   registers, load_query_stats, compute_pt_from_regs), dQ = dS K (issue_dq), the f32 staging of accumulator rows
//   for TMA (stage_rows_f32_sw128) and the zeroing of dK / dV rows no query sees (zero_dk_dv_rows).
// Accumulator layout everywhere: x[nt*4 + 2r + e] = (key krow0 + 8r, column nt*8 + 2t + e), krow0 = the thread's
// first key row (warpgroup*64 + warp*16 + g). Keep C++17.
#pragma once
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace wgbwd {

constexpr int kBr = kWgBwdRows;  // 64 queries per tile
constexpr int kBc = kWgBwdKeys;  // 128 keys per CTA

// X^T (64 keys x R queries per warpgroup) = A_wg B^T in D/16 k-steps: a_wg is this warpgroup's first row
// of a (128, D) K or V tile, b an (R, D) Q or dO tile, both K-major. R = 64: wgmma m64n64k16; 128: m64n128k16.
template <int D, int R = kBr>
__device__ __forceinline__ void issue_kq(float (&x)[R / 2], uint32_t a_wg, uint32_t b) {
  const uint64_t a0 = sw128_desc(opaque_u32(a_wg), 16, 1024), b0 = sw128_desc(opaque_u32(b), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t a = a0 + uint64_t(((kk / 4) * (kBc * 128) + (kk % 4) * 32) >> 4);
    const uint64_t bb = b0 + uint64_t(((kk / 4) * (R * 128) + (kk % 4) * 32) >> 4);
    if constexpr (R == 128) wgmma_m64n128k16_ss(x, a, bb, kk > 0 ? 1 : 0);
    else wgmma_m64n64k16_ss(x, a, bb, kk > 0 ? 1 : 0);
  }
}

// acc (64 keys x D per warpgroup) += A B where A (64 keys x R queries) is in registers as bf16 A
// fragments (af[4kk..4kk+3] = queries 16kk..16kk+15) and B is an (R, D) Q or dO tile read MN-major.
// D = 128: wgmma m64n128k16; D = 64: m64n64k16.
template <int D, int R = kBr>
__device__ __forceinline__ void issue_acc(float (&acc)[D / 2], const uint32_t (&af)[R / 4], uint32_t b) {
  const uint64_t b0 = sw128_desc(opaque_u32(b), R * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < R / 16; ++kk) {
    if constexpr (D == 128)
      wgmma_m64n128k16_rs_bmn(acc, af[4 * kk], af[4 * kk + 1], af[4 * kk + 2], af[4 * kk + 3],
                              b0 + uint64_t((kk * 16 * 128) >> 4));
    else
      wgmma_m64n64k16_rs_bmn(acc, af[4 * kk], af[4 * kk + 1], af[4 * kk + 2], af[4 * kk + 3],
                             b0 + uint64_t((kk * 16 * 128) >> 4));
  }
}

// dQ (64 queries x 64 columns) = dS K over KEYS keys: dS^T (keys x 64 queries, from row `ds_rows`) and K
// (keys x 64 columns, from `k_cols`) are both read MN-major, KEYS/16 k-steps of 16 keys. D = 128: all 128
// keys, the 64 columns of this warpgroup's D half; D = 64: this warpgroup's 64 keys, all 64 columns.
template <int KEYS>
__device__ __forceinline__ void issue_dq(float (&dq)[32], uint32_t ds_rows, uint32_t k_cols) {
  const uint64_t a0 = sw128_desc(opaque_u32(ds_rows), kBc * 128, 1024);
  const uint64_t b0 = sw128_desc(opaque_u32(k_cols), kBc * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < KEYS / 16; ++kk) {
    const uint64_t off = uint64_t((kk * 16 * 128) >> 4);
    wgmma_m64n64k16_ss_mn(dq, a0 + off, b0 + off, kk > 0 ? 1 : 0);
  }
}

// Before issue_dq and the dK MMA behind it: the dQ accumulator zeroed, and dQ, dK and the dS^T A fragments fenced
// for the wgmmas that read or write them.
template <int NK, int NDF>
__device__ __forceinline__ void begin_dq_dk(float (&dq)[32], float (&dk)[NK], uint32_t (&df)[NDF]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) dq[i] = 0.f;
  wgmma_fence_regs(dq);
  wgmma_fence_regs(dk);
  fence_regs_u32(df);
  wgmma_fence();
}

// Where masking is needed, the limits of one (64 queries x 128 keys) tile as 32-bit offsets from (q0, k0): query
// row qi and key row kj (tile-relative) are visible iff qi < q_lim, kj < k_lim and (!causal || kj <= qi + diag).
// The int64 limits are clamped to +-2^30, far outside [0, 128), so the comparisons keep their result.
struct TileMask {
  int q_lim, k_lim, diag;
  bool causal;
};
__device__ __forceinline__ int clamp_rel(int64_t x) { return int(x < -(1 << 30) ? -(1 << 30) : x > (1 << 30) ? (1 << 30) : x); }
__device__ __forceinline__ TileMask tile_mask(const AttnBwdParams& p, int64_t q0, int64_t k0) {
  return TileMask{clamp_rel(p.q_end - q0), clamp_rel(p.k_end - k0), clamp_rel(q0 + p.diag - k0), p.causal};
}

// P^T = exp2(S^T scale2 - lse log2e) in place of s (64 keys x 64 queries per warpgroup, accumulator layout
// x[nt*4 + 2r + e] = (tile key krow0 + 8r, tile query nt*8 + 2t + e)), zero where masked.
__device__ __forceinline__ void compute_pt(float (&s)[32], float scale2, const float* lse_t, const TileMask& m,
                                           int krow0, bool need_mask, int t) {
#pragma unroll
  for (int nt = 0; nt < kBr / 8; ++nt) {
    const float2 lse2v = *reinterpret_cast<const float2*>(lse_t + nt * 8 + 2 * t);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float lse_raw = e ? lse2v.y : lse2v.x;
      const float lse2 = lse_raw == -INFINITY ? INFINITY : lse_raw * kLog2e;  // no visible key: P = 0
      const int qi = nt * 8 + 2 * t + e;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float pv = fast_exp2(fmaf(s[nt * 4 + 2 * r + e], scale2, -lse2));
        if (need_mask) {
          const int kj = krow0 + 8 * r;
          const bool visible = qi < m.q_lim && kj < m.k_lim && (!m.causal || kj <= qi + m.diag);
          if (!visible) pv = 0.f;
        }
        s[nt * 4 + 2 * r + e] = pv;
      }
    }
  }
}

// bwd v5: this thread's 16 query statistics of a tile (queries nt*8 + 2t, +1 as x[nt]), read from shared memory
// into registers before the wgmma they follow is waited for, so the loads are in flight under it (under load the
// shared-memory pipe queues them behind the wgmma operand reads: ncu put a quarter of the exps' time on them).
// FIRST / N: the statistics of queries [8 FIRST, 8 (FIRST + N)) only (a 128-query tile reads them in halves).
template <int N, int FIRST = 0>
__device__ __forceinline__ void load_query_stats(float2 (&x)[N], const float* stats_t, int t) {
#pragma unroll
  for (int nt = 0; nt < N; ++nt) x[nt] = *reinterpret_cast<const float2*>(stats_t + (FIRST + nt) * 8 + 2 * t);
}

// As compute_pt, from registers holding lse * log2e (+inf where no key is visible: the producer stores it so),
// and with the masked and unmasked tiles as two straight-line loops under one uniform branch (masked elements
// take an exponent of -inf); a select per element in one loop made ptxas branch around each element's mask.
// FIRST / N: the query columns [8 FIRST, 8 (FIRST + N)) of s only (lse2[nt] is column group FIRST + nt).
template <int N, int FIRST = 0, int S>
__device__ __forceinline__ void compute_pt_from_regs(float (&s)[S], float scale2, const float2 (&lse2)[N],
                                                     const TileMask& m, int krow0, bool need_mask, int t) {
  static_assert(4 * (FIRST + N) <= S, "compute_pt_from_regs: columns past the fragment");
  if (!need_mask) {
#pragma unroll
    for (int nt = FIRST; nt < FIRST + N; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float l = (i & 1) ? lse2[nt - FIRST].y : lse2[nt - FIRST].x;
        s[nt * 4 + i] = fast_exp2(fmaf(s[nt * 4 + i], scale2, -l));
      }
    return;
  }
#pragma unroll
  for (int nt = FIRST; nt < FIRST + N; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = i & 1, r = i >> 1, qi = nt * 8 + 2 * t + e, kj = krow0 + 8 * r;
      const bool visible = qi < m.q_lim && kj < m.k_lim && (!m.causal || kj <= qi + m.diag);
      const float l = e ? lse2[nt - FIRST].y : lse2[nt - FIRST].x;
      s[nt * 4 + i] = fast_exp2(fmaf(s[nt * 4 + i], scale2, visible ? -l : -INFINITY));
    }
}

// Documents (kernels/cuda/attention/attn_doc_mask.cuh): zeroes P^T (layout of compute_pt) where query q0 + nt*8 + 2t + e
// of sample b does not see this thread's key r (position kpos[r]): unless doc(i) <= kpos <= pos(i).
__device__ __forceinline__ void doc_mask_pt(float (&s)[32], const AttnBwdParams& p, int64_t b, int64_t q0,
                                            const int64_t (&kpos)[2], int t) {
#pragma unroll
  for (int nt = 0; nt < kBr / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t row = b * p.docs.q_stride + min(q0 + nt * 8 + 2 * t + e, p.q_end - 1);  // past q_end: P = 0
      const int64_t qp = p.docs.q_pos[row], qd = p.docs.q_doc[row];
#pragma unroll
      for (int r = 0; r < 2; ++r)
        if (kpos[r] < qd || kpos[r] > qp) s[nt * 4 + 2 * r + e] = 0.f;
    }
}

// After P^T was formed in s: packs it into pf (bf16 A fragments), issues dV += P^T dO (do_tile: the tile's dO;
// it runs while dS^T is formed), then waits for dP^T (issued before dV). Returns with dV possibly still running.
template <int D>
__device__ __forceinline__ void issue_dv_wait_dp(const float (&s)[32], float (&dp)[32], float (&dv)[D / 2],
                                                 uint32_t (&pf)[16], uint32_t do_tile) {
#pragma unroll
  for (int i = 0; i < 16; ++i) pf[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
  wgmma_fence_regs(dv);
  fence_regs_u32(pf);
  wgmma_fence();
  issue_acc<D>(dv, pf, do_tile);
  wgmma_commit();
  wgmma_wait<1>();  // dP^T ready; dV may still run
  wgmma_fence_regs(dp);
}

// dS^T = P^T (dP^T - delta) in place of dp, packed to bf16 A fragments df, and stored (keys x queries) to the
// sw128 dS^T tile: df[2nt + r] holds (key krow0 + 8r, queries nt*8 + 2t, +1).
__device__ __forceinline__ void compute_dst_store(float (&dp)[32], uint32_t (&df)[16], const float (&s)[32],
                                                  const float* delta_t, uint32_t ds_tile, int krow0, int t) {
#pragma unroll
  for (int nt = 0; nt < kBr / 8; ++nt) {
    const float2 dl = *reinterpret_cast<const float2*>(delta_t + nt * 8 + 2 * t);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      dp[nt * 4 + 2 * r] = s[nt * 4 + 2 * r] * (dp[nt * 4 + 2 * r] - dl.x);
      dp[nt * 4 + 2 * r + 1] = s[nt * 4 + 2 * r + 1] * (dp[nt * 4 + 2 * r + 1] - dl.y);
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) df[i] = pack_bf16(dp[2 * i], dp[2 * i + 1]);
#pragma unroll
  for (int nt = 0; nt < kBr / 8; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t a = ds_tile + sw128_offset<kBc>(krow0 + 8 * r, nt) + 4 * t;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(df[2 * nt + r]) : "memory");
    }
}

// bwd v5: dS^T = P^T (dP^T - delta) in bf16 A fragments df (layout of compute_dst_store), with this thread's delta
// already in registers (load_query_stats), stored to the sw128 dS^T tile with 4 stmatrix.x4 instead of 16 32-bit
// stores: matrix j of instruction m is (keys krow0 - g + 8 (j & 1) .. + 7, queries 16m + 8 (j >> 1) .. + 7), whose
// row i lane 8j + i addresses; `ds_row` is this lane's row offset (ds_row_offset).
__device__ __forceinline__ uint32_t ds_row_offset(int wg, int warp, int lane) {
  const int j = lane >> 3, i = lane & 7, row = wg * 64 + warp * 16 + 8 * (j & 1) + i;
  return uint32_t(row * 128 + (((j >> 1) ^ i) << 4));  // chunk 2m + (j >> 1), swizzled: (2m + (j >> 1)) ^ i
}
// Stores bf16 dS^T fragments (df[2nt + r] = (key krow0 + 8r, queries nt*8 + 2t, +1), R / 8 column groups) to the
// sw128 dS^T tile of 128 keys x R queries (R / 64 blocks of 64 queries, 16 KB apart) with R / 16 stmatrix.x4.
template <int R>
__device__ __forceinline__ void store_dst_stmatrix(const uint32_t (&df)[R / 4], uint32_t ds_tile, uint32_t ds_row) {
  const uint32_t a = ds_tile + ds_row;  // the tile is 1024-byte aligned: chunk 2m (mod 8) lies at a ^ ((m & 3) << 5)
#pragma unroll
  for (int m = 0; m < R / 16; ++m)
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                     (a ^ uint32_t((m & 3) << 5)) + uint32_t(m >> 2) * (kBc * 128)),
                 "r"(df[4 * m]), "r"(df[4 * m + 1]), "r"(df[4 * m + 2]), "r"(df[4 * m + 3])
                 : "memory");
}
__device__ __forceinline__ void compute_dst_store_stmatrix(const float (&dp)[32], uint32_t (&df)[16],
                                                           const float (&s)[32], const float2 (&dl)[8],
                                                           uint32_t ds_tile, uint32_t ds_row) {
#pragma unroll
  for (int nt = 0; nt < kBr / 8; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      df[2 * nt + r] = pack_bf16(s[nt * 4 + 2 * r] * (dp[nt * 4 + 2 * r] - dl[nt].x),
                                 s[nt * 4 + 2 * r + 1] * (dp[nt * 4 + 2 * r + 1] - dl[nt].y));
  store_dst_stmatrix<kBr>(df, ds_tile, ds_row);
}

// The 128-query tile (D = 64): dS^T = P^T (dP^T - delta) in place of dp for query column groups [FIRST, FIRST + N)
// (this thread's delta of those groups in dl), in f32 (the bf16 packing follows once P^T's f32 values are dead).
template <int N, int FIRST>
__device__ __forceinline__ void compute_dst_inplace(float (&dp)[64], const float (&s)[64], const float2 (&dl)[N]) {
#pragma unroll
  for (int nt = FIRST; nt < FIRST + N; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      dp[nt * 4 + 2 * r] = s[nt * 4 + 2 * r] * (dp[nt * 4 + 2 * r] - dl[nt - FIRST].x);
      dp[nt * 4 + 2 * r + 1] = s[nt * 4 + 2 * r + 1] * (dp[nt * 4 + 2 * r + 1] - dl[nt - FIRST].y);
    }
}

// Stores a (64 rows, 8 NT columns) f32 accumulator fragment of a warpgroup (x[FIRST + nt*4 + 2r + e] = row
// warp*16 + g + 8r, column nt*8 + 2t + e), times `scale`, as NT / 4 blocks of (64 rows, 32 columns) at `blocks`
// (8 KB apart) in the 128-byte swizzle of an f32 tensor map: column c is in block c / 32, 16-byte chunk
// (c % 32) / 4, which sits at chunk ^ (row & 7) (row & 7 = g). Shared memory serves 8-byte stores per half-warp
// (g 0-3, g 4-7), and rows g and g ^ 1 put the same columns in the same 8 banks; so lanes of odd g store column
// group nt ^ 2 where even lanes store nt (one select per value), and each half-warp's 16 stores then cover all
// 32 banks once: 2 wavefronts per instruction, the minimum for 256 bytes (ncu had counted 4 with every lane on nt).
template <int NT, int FIRST = 0, int N>
__device__ __forceinline__ void stage_rows_f32_sw128(uint32_t blocks, const float (&x)[N], float scale, int warp,
                                                     int g, int t) {
  static_assert(FIRST + 4 * NT <= N, "stage_rows_f32_sw128: columns past the fragment");
  static_assert(NT % 4 == 0, "stage_rows_f32_sw128: whole 32-column blocks (the odd rows' swap stays in one)");
  const bool odd = (g & 1) != 0;
  const uint32_t swz = uint32_t(g ^ (odd ? 4 : 0));  // group nt ^ 2 is chunk ^ 4, then the tensor map's ^ (row & 7)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + 8 * r, chunk = (nt % 4) * 2 + t / 2;
      const int mine = FIRST + nt * 4 + 2 * r, swapped = FIRST + (nt ^ 2) * 4 + 2 * r;
      const uint32_t a = blocks + uint32_t(nt / 4) * (kBr * 128) + uint32_t(row) * 128 +
                         ((uint32_t(chunk) ^ swz) << 4) + uint32_t(t & 1) * 8;
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"((odd ? x[swapped] : x[mine]) * scale),
                   "f"((odd ? x[swapped + 1] : x[mine + 1]) * scale)
                   : "memory");
    }
}

// Overwrite mode, a CTA whose keys no query sees: zeroes its dK / dV rows [k0, min(k0 + 128, k_end)) (two key
// sources: those of its source, bwd_key_source).
template <int D>
__device__ __forceinline__ void zero_dk_dv_rows(const AttnBwdParams& p, int64_t k0, int64_t b, int64_t hk, int tid,
                                                int threads) {
  const BwdKeySource src = bwd_key_source(p, k0);  // two key sources: the tile's rows in its own
  const int64_t rows = (src.end - src.row < kBc ? src.end - src.row : kBc);
  for (int64_t i = tid; i < rows * (D / 4); i += threads) {
    const int64_t off = ((b * src.rows + src.row + i / (D / 4)) * p.Hkv + hk) * D + (i % (D / 4)) * 4;
    *reinterpret_cast<float4*>(src.dk + off) = make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<float4*>(src.dv + off) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

}  // namespace wgbwd
}  // namespace cuda
}  // namespace rt
