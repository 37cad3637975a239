// The per-tile device pieces of the Hopper attention forward kernels (fwd v4 attn_fwd_sm90.cu, fwd v5
// attn_fwd_sm90ws.cu): S = Q K^T and O += P V issued as wgmma on 128-byte-swizzled shared-memory tiles
// (attn_sm90_wgmma_ops.cuh), the online softmax of one 128-key tile on the S accumulator (exp2 on prescaled scores, m
// in log2 units, masks only on tiles that cross the key-range end or the causal diagonal), the O rescale, and the
// fp32 state rows read before the key loop and written after it, and the document mask of a tile (kDocs).
// A consumer warpgroup owns 64 query rows of a 128-row Q tile. Keep C++17.
#pragma once
#include <climits>

#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace wgfwd {

constexpr int kWgRowsPerCta = 128;   // Br: 2 warpgroups x 64 rows
constexpr int kWgKeysPerTile = 128;  // Bc

// S (64 x 128 per warpgroup) = Q_wg K_tile^T in D/16 k-steps. q_wg: this warpgroup's first Q row in the
// (kQRows, D) tile; k_tile: a (128, D) tile.
template <int D, int kQRows = kWgRowsPerCta>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t q_wg, uint32_t k_tile) {
  // The start address is the descriptor's low field (bytes / 16); offsets are added to it directly.
  const uint64_t a0 = sw128_desc(opaque_u32(q_wg), 16, 1024), b0 = sw128_desc(k_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t a = a0 + uint64_t(((kk / 4) * (kQRows * 128) + (kk % 4) * 32) >> 4);
    const uint64_t b = b0 + uint64_t(((kk / 4) * (kWgKeysPerTile * 128) + (kk % 4) * 32) >> 4);
    wgmma_m64n128k16_ss(s, a, b, kk > 0 ? 1 : 0);
  }
}

// O (64 x D per warpgroup) += P V_tile in 8 k-steps of 16 keys; pf holds P as bf16 A fragments.
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&pf)[32], uint32_t v_tile) {
  const uint64_t b0 = sw128_desc(v_tile, kWgKeysPerTile * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kWgKeysPerTile / 16; ++kk) {
    const uint64_t b = b0 + uint64_t((kk * 16 * 128) >> 4);
    if constexpr (D == 128) wgmma_m64n128k16_rs_bmn(o, pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3], b);
    else wgmma_m64n64k16_rs_bmn(o, pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3], b);
  }
}

// The document mask of one consumer thread (kDocs; kernels/cuda/attention/attn_doc_mask.cuh): its warpgroup's 64-row
// summary and its own two rows' positions and document starts, read once per CTA.
struct FwdDocRows {
  DocRange wg;             // min / max of pos and doc over the warpgroup's 64 rows
  int64_t pos[2], doc[2];  // this thread's rows lrow0 and lrow0 + 8 (rows past q_end read the last row)
};

// The raw summary of one 128-key tile: its two 64-key summary tiles' min / max kpos, loaded one tile ahead of
// its softmax so the loads are in flight under the MMAs instead of on the softmax's critical path.
struct FwdDocKeys {
  int64_t lo0, hi0, lo1, hi1;
};

// kWarpSummary (fwd v5's list mode, which has no per-call summaries): r.wg is instead the least position and greatest
// document start over the 16 rows of this thread's warp (every lane of the warp calls it; a tighter range than the
// warpgroup's), with pos_hi = +max and doc_lo = -max: softmax_tile only asks whether every pair is visible.
template <bool kDocs, bool kWarpSummary = false>
__device__ __forceinline__ FwdDocRows fwd_doc_rows(const AttnFwdParams& p, int64_t b, int64_t q0, int wg_row0,
                                                  int lrow0) {
  FwdDocRows r{};
  if constexpr (kDocs) {
    if constexpr (!kWarpSummary) r.wg = doc_q_range(p.docs, b, int((q0 + wg_row0 - p.q_begin) / kDocTileRows), 1);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t row = b * p.docs.q_stride + min(q0 + lrow0 + 8 * i, p.q_end - 1);
      r.pos[i] = p.docs.q_pos[row];
      r.doc[i] = p.docs.q_doc[row];
    }
    if constexpr (kWarpSummary) {
      // Only the least position and the greatest document start decide "every pair visible"; the other two are
      // constants that make the tile test's "no pair visible" branch fold away (and free their registers).
      int64_t pos_lo = min(r.pos[0], r.pos[1]), doc_hi = max(r.doc[0], r.doc[1]);
      warp_min_max(pos_lo, doc_hi);
      // Broadcast from lane 0, so that the compiler knows they are warp-uniform: they go to uniform registers
      // (the list-mode kernel's D = 128 spill went from 72 to 44 bytes).
      pos_lo = __shfl_sync(0xffffffffu, pos_lo, 0);
      doc_hi = __shfl_sync(0xffffffffu, doc_hi, 0);
      r.wg = DocRange{pos_lo, LLONG_MAX, LLONG_MIN, doc_hi};
    }
  }
  return r;
}

// Issues the summary loads of the key tile starting at kt0 (nothing without kDocs).
template <bool kDocs>
__device__ __forceinline__ FwdDocKeys fwd_doc_keys(const AttnFwdParams& p, int64_t b, int64_t kt0) {
  FwdDocKeys k{0, 0, 0, 0};
  if constexpr (kDocs) {
    const int t0 = int((kt0 - p.k_begin) / kDocTileRows);
    const int t1 = min(t0 + 1, p.docs.nk_tiles - 1);  // a tile past the call's last key repeats the last one
    const int64_t* s0 = p.docs.k_sum + (b * p.docs.nk_tiles + t0) * 2;
    const int64_t* s1 = p.docs.k_sum + (b * p.docs.nk_tiles + t1) * 2;
    k = FwdDocKeys{s0[0], s0[1], s1[0], s1[1]};
  }
  return k;
}

// One tile of the online softmax for this thread's two rows (CTA-local rows lrow0 and lrow0 + 8 of the CTA
// starting at query row q0; the warpgroup's rows start at local row wg_row0).
// s[nt*4 + 2r + e] is the score of row r and key nt*8 + 2t + e of the tile starting at key kt0. Masks keys
// >= k_hi and (causal) keys above the diagonal when the tile needs it, updates m_run and l_run (per-thread
// partial sums), returns alpha (the factor O must be rescaled by) and P as bf16 A fragments:
// pf[4kk + {0,1,2,3}] = keys 16kk + {2t, 2t+1} of rows {0, 1}, then keys 16kk + 8 + {2t, 2t+1} of rows {0, 1}.
// kDocs: a tile not wholly visible to the warpgroup's rows (dr.wg against the tile's summary dk) takes the
// element mask, reading the keys' position words from key_pos (kKeysInSmem: the stage's (128) u32 in shared
// memory, fwd v5's key_positions_warp) or else from p.docs.k_pos in global memory (fwd v4). Without kDocs, dr, dk,
// b and key_pos are unused and no code is added.
template <bool kDocs, bool kKeysInSmem = false>
__device__ __forceinline__ void softmax_tile(float (&s)[64], uint32_t (&pf)[32], float (&alpha)[2], float (&m_run)[2],
                                             float (&l_run)[2], const AttnFwdParams& p, int64_t kt0, int64_t k_hi,
                                             int64_t q0, int wg_row0, int lrow0, int t, const FwdDocRows& dr,
                                             const FwdDocKeys& dk, int64_t b, const uint32_t* key_pos = nullptr) {
  bool doc_mask = false;  // warpgroup-uniform
  if constexpr (kDocs) {
    const DocRange keys{min(dk.lo0, dk.lo1), max(dk.hi0, dk.hi1), 0, 0};
    doc_mask = doc_tile_class(dr.wg, keys) != kDocFull;
  }
  // The warpgroup's first row q0 + wg_row0 is the one most restricted by the diagonal.
  const bool need_mask = kt0 + kWgKeysPerTile > k_hi ||
                         (p.causal && kt0 + kWgKeysPerTile - 1 > q0 + wg_row0 + p.diag) || doc_mask;
  if (need_mask) {
    // Tile-local ints: key jj is visible to CTA-local row lr iff jj < kmax and (not causal or jj - lr <= cd).
    const int kmax = int(min(k_hi - kt0, int64_t(kWgKeysPerTile)));
    const int cd = p.causal ? int(max(min(q0 + p.diag - kt0, int64_t(1) << 20), -(int64_t(1) << 20))) : (1 << 20);
    // Documents (edge tiles): key jj is also visible to row r iff lo[r] <= off(jj) <= hi[r], in 32-bit offsets
    // from the tile's least key position: the positions of one sample lie within 2^31 of each other (DESIGN.md
    // "Document masks"), so the wrapping difference of the keys' low words is exact. One loop applies both
    // masks: a separate document loop writing s (even one without loads) made ptxas serialize the wgmmas
    // (C7513), and the 64-bit position loads cost two registers per key.
    int lo[2] = {-(1 << 30), -(1 << 30)}, hi[2] = {1 << 30, 1 << 30};  // doc(i) - base, pos(i) - base, clamped
    uint32_t base32 = 0;
    if constexpr (kDocs) {
      if (doc_mask) {
        const int64_t base = min(dk.lo0, dk.lo1);
        base32 = uint32_t(base);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          lo[r] = int(max(min(dr.doc[r] - base, int64_t(1) << 30), -(int64_t(1) << 30)));
          hi[r] = int(max(min(dr.pos[r] - base, int64_t(1) << 30), -(int64_t(1) << 30)));
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < kWgKeysPerTile / 8; ++nt) {
      uint2 kw = make_uint2(0u, 0u);  // documents: the low position words of keys nt*8 + 2t and + 1
      if constexpr (kDocs) {
        if (doc_mask) {
          if constexpr (kKeysInSmem) {  // fwd v5: the stage's positions in shared memory (key_positions_warp)
            kw = *reinterpret_cast<const uint2*>(key_pos + nt * 8 + 2 * t);
          } else {  // the low words of k_pos[kt0 + jj] in global memory (little-endian)
            const uint32_t* kpos32 = reinterpret_cast<const uint32_t*>(p.docs.k_pos + b * p.docs.k_stride + kt0);
            kw = make_uint2(kpos32[2 * min(nt * 8 + 2 * t, kmax - 1)], kpos32[2 * min(nt * 8 + 2 * t + 1, kmax - 1)]);
          }
        }
      }
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
        const int jj = nt * 8 + 2 * t + e2;
        int off = 0;
        if constexpr (kDocs) off = doc_mask ? int((e2 ? kw.y : kw.x) - base32) : 0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int lr = lrow0 + r * 8;
          if (!(jj < kmax && jj - lr <= cd && off >= lo[r] && off <= hi[r])) s[nt * 4 + 2 * r + e2] = -INFINITY;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kWgKeysPerTile / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(m_run[r], mx * p.scale2);
    const float muse = mnew == -INFINITY ? 0.f : mnew;  // never (-inf) - (-inf)
    alpha[r] = fast_exp2(m_run[r] - muse);
    m_run[r] = mnew;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kWgKeysPerTile / 8; ++nt) {
      const float p0 = fast_exp2(fmaf(s[nt * 4 + 2 * r], p.scale2, -muse));
      const float p1 = fast_exp2(fmaf(s[nt * 4 + 2 * r + 1], p.scale2, -muse));
      sum += p0 + p1;
      s[nt * 4 + 2 * r] = p0;
      s[nt * 4 + 2 * r + 1] = p1;
    }
    l_run[r] = l_run[r] * alpha[r] + sum;
  }
#pragma unroll
  for (int kk = 0; kk < kWgKeysPerTile / 16; ++kk) {
    pf[4 * kk + 0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
    pf[4 * kk + 1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
    pf[4 * kk + 2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
    pf[4 * kk + 3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

template <int D>
__device__ __forceinline__ void rescale_o(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
    o[nt * 4 + 0] *= alpha[0];
    o[nt * 4 + 1] *= alpha[0];
    o[nt * 4 + 2] *= alpha[1];
    o[nt * 4 + 3] *= alpha[1];
  }
}

// The fp32 state of this thread's two rows (row0 and row0 + 8, absolute query rows; bh_row0: the (B,H,Nq) index
// of row 0 of this head): m and l read (l only by the quad's thread 0, the others start their partial sums at
// 0), and O from acc for rows that have seen a key (zeros otherwise; acc is not read for m = -inf rows).
template <int D>
__device__ __forceinline__ void load_state_rows(const AttnFwdParams& p, int64_t row0, int64_t bh_row0, int t,
                                                float (&m_run)[2], float (&l_run)[2], float (&o)[D / 2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + 8 * r;
    const bool ok = row < p.q_end;
    m_run[r] = ok ? p.m[bh_row0 + row] : -INFINITY;
    l_run[r] = (ok && t == 0) ? p.l[bh_row0 + row] : 0.f;
    const bool seen = m_run[r] != -INFINITY;  // false also for rows past q_end
    const float* acc_row = p.acc + (bh_row0 + row) * D;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const float2 va = seen ? *reinterpret_cast<const float2*>(acc_row + nt * 8 + 2 * t) : make_float2(0.f, 0.f);
      o[nt * 4 + 2 * r] = va.x;
      o[nt * 4 + 2 * r + 1] = va.y;
    }
  }
}

// A row's l: each of the quad's 4 threads holds the sum over its own columns.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Writes the state of this thread's two rows back (rows past q_end untouched): l summed over the quad, m and l
// by the quad's thread 0, O into acc.
template <int D>
__device__ __forceinline__ void store_state_rows(const AttnFwdParams& p, int64_t row0, int64_t bh_row0, int t,
                                                 const float (&m_run)[2], const float (&l_run)[2],
                                                 const float (&o)[D / 2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + 8 * r;
    const float lx = quad_sum(l_run[r]);
    if (row >= p.q_end) continue;
    if (t == 0) {
      p.m[bh_row0 + row] = m_run[r];
      p.l[bh_row0 + row] = lx;
    }
    float* acc_row = p.acc + (bh_row0 + row) * D;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(acc_row + nt * 8 + 2 * t) = make_float2(o[nt * 4 + 2 * r], o[nt * 4 + 2 * r + 1]);
  }
}

// Starts this thread's two rows from a fresh state: m = -inf, l = 0, O = 0 (attn_fwd_whole).
template <int D>
__device__ __forceinline__ void fresh_state_rows(float (&m_run)[2], float (&l_run)[2], float (&o)[D / 2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    m_run[r] = -INFINITY;
    l_run[r] = 0.f;
  }
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
}

// Finalizes this thread's two rows (row0, row0 + 8 of head h, batch b; rows past q_end untouched) into
// p.out (B,Nq,H,D) bf16 = O / l (0 where l == 0) and p.lse (B,H,Nq) = (m + log2 l) ln 2 (-inf where l == 0),
// as attn_fwd_finalize does from the state.
template <int D>
__device__ __forceinline__ void store_final_rows(const AttnFwdParams& p, int64_t row0, int64_t b, int64_t h, int t,
                                                 const float (&m_run)[2], const float (&l_run)[2],
                                                 const float (&o)[D / 2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + 8 * r;
    const float lx = quad_sum(l_run[r]);
    if (row >= p.q_end) continue;
    if (t == 0) p.lse[(b * p.H + h) * p.Nq + row] = lx > 0.f ? (m_run[r] + log2f(lx)) * kLn2 : -INFINITY;
    const float inv = lx > 0.f ? 1.f / lx : 0.f;
    __nv_bfloat16* out_row = p.out + ((b * p.Nq + row) * p.H + h) * D;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<uint32_t*>(out_row + nt * 8 + 2 * t) =
          pack_bf16(o[nt * 4 + 2 * r] * inv, o[nt * 4 + 2 * r + 1] * inv);
  }
}

}  // namespace wgfwd
}  // namespace cuda
}  // namespace rt
