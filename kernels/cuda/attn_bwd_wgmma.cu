// attn_bwd_block on Hopper (bwd v4, sm_90a): gradients of one K/V block with warpgroup MMA (wgmma),
// recomputing P from the final LSE. Same contract and tiles as the mma.sync v1 kernel in attn_bwd_block.cu,
// which dispatches here (variant 4) and stays the fallback everywhere else.
//   P^T = exp2(S^T*scale*log2e - lse*log2e), dS^T = P^T (dP^T - delta),
//   dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K.
//   * D = 128 or 64 (template); one CTA = 128 keys of one (batch, K/V head) = 2 warpgroups x 64 keys, 256
//     threads, 1 CTA per SM; each warpgroup keeps the f32 dK and dV of its 64 keys (64 x D each) in registers
//     for the whole kernel;
//   * it loops over the query heads of its GQA group and over 64-row query tiles; Q, dO, lse and delta are
//     double-buffered with cp.async into 128-byte-swizzled shared memory (kernels/cuda/wgmma_ops.cuh);
//   * S^T = K Q^T and dP^T = V dO^T: wgmma m64n64k16, K/V and Q/dO read K-major through descriptors; the
//     exps of P^T run while dP^T is still on the tensor cores;
//   * dV += P^T dO and dK += dS^T Q: P^T and dS^T are packed to bf16 in registers and are the register A
//     operands of wgmma m64nDk16; dO and Q are read MN-major (transpose bit), so no transposed copies;
//   * order per tile: S^T, dP^T | exps | dV issued | dS^T formed and stored | barrier | dQ, dK issued | dQ
//     adds while dK runs; the next tile's barrier waits for dK (its loads reuse this tile's Q buffer);
//   * dS^T goes to shared memory once (bf16, keys x queries); dQ (64 queries x 128) = dS K is one wgmma
//     m64n64k16 per warpgroup (its half of D) with both operands MN-major, added to the f32 dq_acc with
//     float2 reductions (red.global.add.v2.f32), or in deterministic mode with the ordered turn protocol of
//     attn_bwd_block.cu;
//   * D = 64: each warpgroup computes a partial dQ (64 queries x 64) over its own 64 keys (4 k-steps, so only
//     a warpgroup barrier after its dS^T store), the warpgroups swap column halves through shared memory and
//     each adds 32 columns of the sum: one add per dQ element per CTA, as at D = 128;
//   * causal: query tiles wholly before the key tile are never visited; only tiles that cross the
//     diagonal or a range end are masked.
// dk_acc / dv_acc rows are each owned by one CTA; they are added with float2 reductions (write_dk_dv).
// bwd v5 (attn_bwd_wgmma_v5_kernel below, RT_ATTN_BWD_VARIANT=5) is the warp-specialized form of the same
// kernel: a producer warp loads, a dQ warp adds dQ with bulk reduces; see its comment.
#include <algorithm>
#include <climits>
#include <mutex>

#include "kernels/cuda/tma_ops.cuh"
#include "kernels/cuda/wgmma_attn_bwd.cuh"
#include "kernels/cuda/wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kWgBwdThreads = 256;
constexpr int kBr = kWgBwdRows;   // 64 queries per tile
constexpr int kBc = kWgBwdKeys;   // 128 keys per CTA

template <int D>
struct WgBwdSmem {
  static constexpr uint32_t kKVBytes = kBc * D * 2;     // (128, D) bf16 sw128
  static constexpr uint32_t kQBytes = kBr * D * 2;      // (64, D) bf16 sw128
  static constexpr uint32_t kDsBytes = kBc * kBr * 2;   // (128 keys, 64 queries) bf16 sw128
  static constexpr uint32_t kK = 0;
  static constexpr uint32_t kV = kK + kKVBytes;
  static constexpr uint32_t kQ = kV + kKVBytes;         // (2, 64, D)
  static constexpr uint32_t kDo = kQ + 2 * kQBytes;     // (2, 64, D)
  static constexpr uint32_t kDs = kDo + 2 * kQBytes;
  // D = 64 only: the dQ halves the two warpgroups swap, (2 writers, 4 column blocks, 128 threads) float4.
  static constexpr uint32_t kXchgBytes = D == 64 ? 2 * 4 * 128 * 16 : 0;
  static constexpr uint32_t kXchg = kDs + kDsBytes;
  static constexpr uint32_t kStats = kXchg + kXchgBytes;  // lse (2, 64) f32, then delta (2, 64) f32
  static constexpr size_t kBytes = size_t(kStats) + 4 * kBr * 4 + 1024;  // + alignment slack
};

// X^T (64 keys x 64 queries per warpgroup) = A_wg B^T in D/16 k-steps: a_wg is this warpgroup's first row
// of a (128, D) K or V tile, b a (64, D) Q or dO tile, both K-major.
template <int D>
__device__ __forceinline__ void issue_kq(float (&x)[32], uint32_t a_wg, uint32_t b) {
  const uint64_t a0 = sw128_desc(opaque_u32(a_wg), 16, 1024), b0 = sw128_desc(opaque_u32(b), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t a = a0 + uint64_t(((kk / 4) * (kBc * 128) + (kk % 4) * 32) >> 4);
    const uint64_t bb = b0 + uint64_t(((kk / 4) * (kBr * 128) + (kk % 4) * 32) >> 4);
    wgmma_m64n64k16_ss(x, a, bb, kk > 0 ? 1 : 0);
  }
}

// acc (64 keys x D per warpgroup) += A B where A (64 keys x 64 queries) is in registers as bf16 A
// fragments (af[4kk..4kk+3] = queries 16kk..16kk+15) and B is a (64, D) Q or dO tile read MN-major.
// D = 128: wgmma m64n128k16; D = 64: m64n64k16.
template <int D>
__device__ __forceinline__ void issue_acc(float (&acc)[D / 2], const uint32_t (&af)[16], uint32_t b) {
  const uint64_t b0 = sw128_desc(opaque_u32(b), kBr * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kBr / 16; ++kk) {
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

// Adds this thread's dK and dV rows (keys key_a, key_b = key_a + 8; accumulator layout as in the kernels) to
// dk_acc / dv_acc with float2 reductions: no value comes back, so the CTA's last act is to issue 2 x D / 4
// stores instead of waiting for its reads (a read-add-write epilogue measured 13.7 us per CTA at d128, 7% of a
// 4K CTA). Each row belongs to one CTA, so there is one add per element per launch: still deterministic. v4's
// epilogue; v5 stages the rows and adds them with TMA (the same L2 add of the same f32 values: equal bits).
template <int D>
__device__ __forceinline__ void write_dk_dv(const AttnBwdParams& p, const float (&dk)[D / 2], const float (&dv)[D / 2],
                                            int64_t key_a, int64_t key_b, int64_t b, int64_t hk, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = r ? key_b : key_a;
    if (key >= p.k_end) continue;
    const int64_t off = ((b * p.Nk + key) * p.Hkv + hk) * D;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      atomic_add_f32x2(p.dk + off + col, dk[nt * 4 + 2 * r] * p.scale, dk[nt * 4 + 2 * r + 1] * p.scale);
      atomic_add_f32x2(p.dv + off + col, dv[nt * 4 + 2 * r], dv[nt * 4 + 2 * r + 1]);
    }
  }
}

// As compute_dst_store, without writing dS^T back into dp: each pair of P^T / dP^T values dies as soon as it
// is packed (v5, where the consumers have 232 registers instead of 255).
__device__ __forceinline__ void compute_dst_store_packed(const float (&dp)[32], uint32_t (&df)[16],
                                                         const float (&s)[32], const float* delta_t,
                                                         uint32_t ds_tile, int krow0, int t) {
#pragma unroll
  for (int nt = 0; nt < kBr / 8; ++nt) {
    const float2 dl = *reinterpret_cast<const float2*>(delta_t + nt * 8 + 2 * t);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      df[2 * nt + r] = pack_bf16(s[nt * 4 + 2 * r] * (dp[nt * 4 + 2 * r] - dl.x),
                                 s[nt * 4 + 2 * r + 1] * (dp[nt * 4 + 2 * r + 1] - dl.y));
      const uint32_t a = ds_tile + sw128_offset<kBc>(krow0 + 8 * r, nt) + 4 * t;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(df[2 * nt + r]) : "memory");
    }
  }
}

// Stores a (64 rows, 8 NT columns) f32 accumulator fragment of a warpgroup (x[FIRST + nt*4 + 2r + e] = row
// warp*16 + g + 8r, column nt*8 + 2t + e), times `scale`, as NT / 4 blocks of (64 rows, 32 columns) at `blocks`
// (8 KB apart) in the 128-byte swizzle of an f32 tensor map: column c is in block c / 32, 16-byte chunk
// (c % 32) / 4, which sits at chunk ^ (row & 7) (row & 7 = g). A warp's float2 stores of 8 rows x 32 bytes hit
// every bank twice, the minimum for 256 bytes.
template <int NT, int FIRST = 0, int N>
__device__ __forceinline__ void stage_rows_f32_sw128(uint32_t blocks, const float (&x)[N], float scale, int warp,
                                                     int g, int t) {
  static_assert(FIRST + 4 * NT <= N, "stage_rows_f32_sw128: columns past the fragment");
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + 8 * r, chunk = (nt % 4) * 2 + t / 2;
      const uint32_t a = blocks + uint32_t(nt / 4) * (kBr * 128) + uint32_t(row) * 128 + (uint32_t(chunk ^ g) << 4) +
                         uint32_t(t & 1) * 8;
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(x[FIRST + nt * 4 + 2 * r] * scale),
                   "f"(x[FIRST + nt * 4 + 2 * r + 1] * scale)
                   : "memory");
    }
}

// Overwrite mode, a CTA whose keys no query sees: zeroes its dK / dV rows [k0, min(k0 + 128, k_end)).
template <int D>
__device__ __forceinline__ void zero_dk_dv_rows(const AttnBwdParams& p, int64_t k0, int64_t b, int64_t hk, int tid,
                                                int threads) {
  const int64_t rows = (p.k_end - k0 < kBc ? p.k_end - k0 : kBc);
  for (int64_t i = tid; i < rows * (D / 4); i += threads) {
    const int64_t off = ((b * p.Nk + k0 + i / (D / 4)) * p.Hkv + hk) * D + (i % (D / 4)) * 4;
    *reinterpret_cast<float4*>(p.dk + off) = make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<float4*>(p.dv + off) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

struct dq_dims {
  int64_t b, h, q0;
};

// Adds this thread's dQ values (the 2 x NT float2 at columns col0 + nt*8 + 2t of query rows qa, qb = qa + 8)
// to dq_acc: float2 atomics, or in deterministic mode the ordered adds of attn_bwd_block.cu (key tile
// blockIdx.x adds when the query tile's counter reads it; every thread of the CTA must call this).
template <int D, int NT>
__device__ __forceinline__ void add_dq(const AttnBwdParams& p, const dq_dims& w, const float (&x)[4 * NT], int col0,
                                       int warp, int g, int t) {
  const int64_t qa = w.q0 + warp * 16 + g, qb = qa + 8;
  float* dq_a = p.dq + ((w.b * p.Nq + qa) * p.H + w.h) * D + col0;
  float* dq_b = p.dq + ((w.b * p.Nq + qb) * p.H + w.h) * D + col0;
  if (p.dq_turn == nullptr) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = nt * 8 + 2 * t;
      if (qa < p.q_end) atomic_add_f32x2(dq_a + col, x[nt * 4 + 0] * p.scale, x[nt * 4 + 1] * p.scale);
      if (qb < p.q_end) atomic_add_f32x2(dq_b + col, x[nt * 4 + 2] * p.scale, x[nt * 4 + 3] * p.scale);
    }
  } else {
    const int64_t n_tiles = (p.q_end - p.q_begin + kBr - 1) / kBr;
    int* turn = p.dq_turn + (w.b * p.H + w.h) * n_tiles + (w.q0 - p.q_begin) / kBr;
    const int mine = int(blockIdx.x);
    dq_turn_wait(turn, mine);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = nt * 8 + 2 * t;
      if (qa < p.q_end) ordered_add_f32x2(dq_a + col, x[nt * 4 + 0] * p.scale, x[nt * 4 + 1] * p.scale);
      if (qb < p.q_end) ordered_add_f32x2(dq_b + col, x[nt * 4 + 2] * p.scale, x[nt * 4 + 3] * p.scale);
    }
    dq_turn_pass(turn, mine);
  }
}

// D = 128, after dS^T of both warpgroups is in shared memory: dQ (64 queries x this warpgroup's 64 columns)
// = dS K, then dK += dS^T Q, which runs during the dQ adds. Returns with dK possibly still in flight.
__device__ __forceinline__ void dq_tile_d128(const AttnBwdParams& p, const dq_dims& w, float (&dk)[64],
                                             float (&dv)[64], uint32_t (&df)[16], uint32_t (&pf)[16],
                                             uint32_t ds_tile, uint32_t k_tile, uint32_t qs, int wg, int warp,
                                             int g, int t) {
  float dq[32];  // dq[nt*4 + 2r + e] = (query warp*16 + g + 8r, column wg*64 + nt*8 + 2t + e)
#pragma unroll
  for (int i = 0; i < 32; ++i) dq[i] = 0.f;
  wgmma_fence_regs(dq);
  wgmma_fence_regs(dk);
  fence_regs_u32(df);
  wgmma_fence();
  issue_dq<kBc>(dq, ds_tile, k_tile + uint32_t(wg) * (kBc * 128));
  wgmma_commit();
  issue_acc<128>(dk, df, qs);
  wgmma_commit();
  wgmma_wait<1>();  // dV and dQ done; dK may still run
  wgmma_fence_regs(dq);
  wgmma_fence_regs(dv);
  fence_regs_u32(pf);
  add_dq<128, 8>(p, w, dq, wg * 64, warp, g, t);
}

// D = 64, after this warpgroup's dS^T rows are in shared memory: a partial dQ (64 queries x 64) = dS K over
// this warpgroup's 64 keys, then dK += dS^T Q (runs during the exchange and the adds). The warpgroups swap
// halves through shared memory: warpgroup w adds columns [32w, 32w + 32) of both partials, so each dQ
// element gets one add per CTA, as at D = 128. Returns with dK possibly still in flight.
__device__ __forceinline__ void dq_tile_d64(const AttnBwdParams& p, const dq_dims& w, float (&dk)[32],
                                            float (&dv)[32], uint32_t (&df)[16], uint32_t (&pf)[16],
                                            uint32_t ds_tile, uint32_t k_tile, uint32_t qs, float4* xchg, int wg,
                                            int warp, int g, int t, int tid) {
  float dq[32];  // dq[nt*4 + 2r + e] = (query warp*16 + g + 8r, column nt*8 + 2t + e), this warpgroup's keys
#pragma unroll
  for (int i = 0; i < 32; ++i) dq[i] = 0.f;
  wgmma_fence_regs(dq);
  wgmma_fence_regs(dk);
  fence_regs_u32(df);
  wgmma_fence();
  issue_dq<64>(dq, ds_tile + uint32_t(wg) * 64 * 128, k_tile + uint32_t(wg) * 64 * 128);
  wgmma_commit();
  issue_acc<64>(dk, df, qs);
  wgmma_commit();
  wgmma_wait<1>();  // dV and dQ done; dK may still run
  wgmma_fence_regs(dq);
  wgmma_fence_regs(dv);
  fence_regs_u32(pf);
  // Thread l of warpgroup w holds the same (query, column) positions as thread l of the other warpgroup.
  // Register indices stay compile-time constants (selects, not dq[runtime]), so dq stays in registers.
  const int l = tid % 128, other = 1 - wg;
  const bool hi = wg == 1;
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // send the other warpgroup's columns: nt = 4 * other + j
    const float4 lo4 = make_float4(dq[j * 4], dq[j * 4 + 1], dq[j * 4 + 2], dq[j * 4 + 3]);
    const float4 hi4 = make_float4(dq[16 + j * 4], dq[16 + j * 4 + 1], dq[16 + j * 4 + 2], dq[16 + j * 4 + 3]);
    xchg[(wg * 4 + j) * 128 + l] = hi ? lo4 : hi4;
  }
  __syncthreads();  // both halves swapped; the next write is after the next tile's first barrier
  float mine[16];  // mine[4j + 2r + e] = column 32*wg + j*8 + 2t + e of query row r, both partials summed
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // keep this warpgroup's columns: nt = 4 * wg + j
    const float4 o = xchg[(other * 4 + j) * 128 + l];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float own = hi ? dq[16 + j * 4 + i] : dq[j * 4 + i];
      mine[j * 4 + i] = own + (i == 0 ? o.x : i == 1 ? o.y : i == 2 ? o.z : o.w);
    }
  }
  add_dq<64, 4>(p, w, mine, wg * 32, warp, g, t);
}

// Barrier of this warpgroup's 128 threads only (named barrier 1 + wg; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_barrier(int wg) {
  if (wg == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

template <int D>
__global__ void __launch_bounds__(kWgBwdThreads, 1) attn_bwd_wgmma_kernel(const AttnBwdParams p) {
#if RT_WGMMA_AVAILABLE
  static_assert(D == 64 || D == 128, "wgmma backward: D must be 64 or 128");
  using Smem = WgBwdSmem<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t k_tile = base + Smem::kK;     // (128, D) bf16 sw128
  const uint32_t v_tile = base + Smem::kV;     // (128, D) bf16 sw128
  const uint32_t q_tiles = base + Smem::kQ;    // (2, 64, D) bf16 sw128
  const uint32_t do_tiles = base + Smem::kDo;  // (2, 64, D) bf16 sw128
  const uint32_t ds_tile = base + Smem::kDs;   // (128 keys, 64 queries) bf16 sw128, dS^T
  float4* xchg = reinterpret_cast<float4*>(smem_raw + (base - raw) + Smem::kXchg);  // D = 64: (2, 4, 128)
  float* lse_s = reinterpret_cast<float*>(smem_raw + (base - raw) + Smem::kStats);  // (2, 64)
  float* delta_s = lse_s + 2 * kBr;                                                 // (2, 64)
  const uint32_t lse_addr = smem_addr(lse_s), delta_addr = smem_addr(delta_s);

  const int tid = int(threadIdx.x);
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // accumulator fragment row group and thread-in-group
  const int64_t k0 = p.k_begin + int64_t(blockIdx.x) * kBc;
  const int64_t hk = blockIdx.y, b = blockIdx.z;

  // Query tiles this CTA visits: [q_first, q_end) in steps of Br, for each head of the group.
  const int64_t q_first = first_query_tile_row<kBr>(p, k0);
  if (q_first >= p.q_end) return;  // no query sees these keys
  const int n_qt = int((p.q_end - q_first + kBr - 1) / kBr);
  const int n_iter = int(p.group) * n_qt;

  const int64_t kv_stride = p.Hkv * D, q_stride = p.H * D;
  const __nv_bfloat16* k_head = p.k + (b * p.Nk * p.Hkv + hk) * D;
  const __nv_bfloat16* v_head = p.v + (b * p.Nk * p.Hkv + hk) * D;
  load_tile_sw128_async<kBc, D, kWgBwdThreads>(k_tile, k_head, kv_stride, k0, p.k_end);
  load_tile_sw128_async<kBc, D, kWgBwdThreads>(v_tile, v_head, kv_stride, k0, p.k_end);

  // Issues the loads of iteration `it` into buffer it & 1.
  auto issue = [&](int it) {
    const int64_t h = hk * p.group + it / n_qt;
    const int64_t q0 = q_first + int64_t(it % n_qt) * kBr;
    const uint32_t buf = uint32_t(it & 1);
    const int64_t head_off = (b * p.Nq * p.H + h) * D;
    load_tile_sw128_async<kBr, D, kWgBwdThreads>(q_tiles + buf * Smem::kQBytes, p.q + head_off, q_stride, q0, p.q_end);
    load_tile_sw128_async<kBr, D, kWgBwdThreads>(do_tiles + buf * Smem::kQBytes, p.dout + head_off, q_stride, q0,
                                            p.q_end);
    if (tid < 2 * kBr) {
      const int r = tid % kBr;
      const bool is_delta = tid >= kBr;
      const float* src = (is_delta ? p.delta : p.lse) + (b * p.H + h) * p.Nq;
      const bool ok = q0 + r < p.q_end;
      const uint32_t dst = (is_delta ? delta_addr : lse_addr) + (buf * kBr + uint32_t(r)) * 4;
      cp_async_4(dst, ok ? src + q0 + r : src, ok ? 4 : 0);
    }
    cp_async_commit();
  };
  issue(0);

  // This thread's keys: CTA-local rows krow0 = wg*64 + warp*16 + g and krow0 + 8.
  const int krow0 = wg * 64 + warp * 16 + g;
  const int64_t key_a = k0 + krow0, key_b = key_a + 8;
  // Accumulators: x[nt*4 + 2r + e] = (key krow0 + 8r, column nt*8 + 2t + e).
  float dk[D / 2], dv[D / 2];  // (64 keys, D) of this warpgroup, f32
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  float s[32], dp[32];  // (64 keys, 64 queries): S^T then P^T; dP^T then dS^T
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = dp[i] = 0.f;

  const uint32_t k_wg = k_tile + uint32_t(wg) * 64 * 128, v_wg = v_tile + uint32_t(wg) * 64 * 128;
  cp_async_wait<0>();  // K, V and the tiles of iteration 0
  fence_proxy_async_smem();
  for (int it = 0; it < n_iter; ++it) {
    // Every thread waited for its copies of `it` and fenced them to the async proxy in the middle of it - 1
    // (with its dS^T stores; the fence there also waits for its dQ atomics of it - 2, long done, instead of
    // this tile's, which are in flight here): after this barrier they are all in place, and every warpgroup
    // is done with the tiles of it - 1 and with dS^T.
    __syncthreads();
    if (it + 1 < n_iter) issue(it + 1);
    const int64_t h = hk * p.group + it / n_qt;
    const int64_t q0 = q_first + int64_t(it % n_qt) * kBr;
    const uint32_t buf = uint32_t(it & 1);
    const uint32_t qs = q_tiles + buf * Smem::kQBytes, dos = do_tiles + buf * Smem::kQBytes;
    const float* lse_t = lse_s + buf * kBr;      // (Br)
    const float* delta_t = delta_s + buf * kBr;  // (Br)

    // S^T = K Q^T and dP^T = V dO^T.
    wgmma_fence_regs(s);
    wgmma_fence_regs(dp);
    wgmma_fence();
    issue_kq<D>(s, k_wg, qs);
    wgmma_commit();
    issue_kq<D>(dp, v_wg, dos);
    wgmma_commit();
    wgmma_wait<1>();  // S^T ready; dP^T may still run
    wgmma_fence_regs(s);

    const bool need_mask = q0 + kBr > p.q_end || k0 + kBc > p.k_end || (p.causal && k0 + kBc - 1 > q0 + p.diag);
    compute_pt(s, p.scale2, lse_t, tile_mask(p, q0, k0), krow0, need_mask, t);
    uint32_t pf[16], df[16];  // P^T and dS^T as bf16 A fragments: [4kk + {0,1,2,3}] = queries 16kk + ...
    issue_dv_wait_dp<D>(s, dp, dv, pf, dos);
    compute_dst_store(dp, df, s, delta_t, ds_tile, krow0, t);
    cp_async_wait<0>();        // this thread's copies of it + 1 (issued at the top of this tile)
    fence_proxy_async_smem();  // dS^T and those tiles, for the wgmma reads
    if constexpr (D == 128) {
      __syncthreads();  // dS^T of both warpgroups is in shared memory
      dq_tile_d128(p, dq_dims{b, h, q0}, dk, dv, df, pf, ds_tile, k_tile, qs, wg, warp, g, t);
    } else {
      warpgroup_barrier(wg);  // this warpgroup's dS^T rows are in shared memory (its dQ reads only those)
      dq_tile_d64(p, dq_dims{b, h, q0}, dk, dv, df, pf, ds_tile, k_tile, qs, xchg, wg, warp, g, t, tid);
    }
    wgmma_wait<0>();  // dK done: the next iteration's loads overwrite this Q buffer, and df is repacked
    wgmma_fence_regs(dk);
    fence_regs_u32(df);
  }

  write_dk_dv<D>(p, dk, dv, key_a, key_b, b, hk, t);
#else
  // Built without an sm_90a image: attn_bwd_wgmma_supported() refuses such binaries, so this never runs.
  __trap();
#endif
}

// ---- bwd v5: warp-specialized (RT_ATTN_BWD_VARIANT=5) -----------------------------------------------------
// Same tiles, math and accumulator layouts as v4, with three warpgroups (384 threads, 1 CTA per SM), persistent:
//   * the work is a list of units (BwdV5Grid: an item = one key tile of one (batch, K/V head) pair, or a piece of
//     one); at most one CTA per SM; CTA c takes unit c first, then fetches the next from a global counter, so
//     units start in list order as they would on a grid of one CTA per unit, and the next unit's loads overlap
//     this one's epilogue (a grid of one CTA per unit spent 2.7 us before the loop and 3.7 us after it per CTA
//     at d128 4K, 7% of a causal CTA);
//   * warpgroups 0 and 1 (consumers, setmaxnreg 240 / 232 at D = 128 / 64) do the MMAs and the exps; warpgroup 2
//     holds the producer warp and the dQ warp. The producer fetches the units and publishes them in a 2-slot ring
//     (mbarriers unit_full / unit_empty) that the other roles read; per unit it loads Q/dO/lse/delta into a
//     2-stage ring that runs on across units (lane 0 loads Q and dO with TMA, the lanes copy lse and delta, and
//     all 32 arrive on the stage's `full` mbarrier, which also waits for the TMA bytes; a stage is refilled
//     after the consumers arrive on its `empty` mbarrier), and K / V with TMA on their own mbarrier once the
//     unit's first stage is in flight and the consumers have released the previous K / V (kv_empty);
//     blocks with q_end < 64 or k_end < 128 run v4 (a TMA box is 64 or 128 rows);
//   * no CTA-wide barrier in the loop: dS^T has 2 stages, so the only per-tile barrier between the consumers is
//     "dS^T stored" (D = 128: both warpgroups, their dQ halves read all 128 keys; D = 64: per warpgroup, each
//     forms a partial dQ over its own keys);
//   * dQ (scaled, f32) goes to one of 2 staging buffers in the 128-byte swizzle of the dq_acc tensor map (named
//     barriers dQ empty / full per buffer with the dQ warp); the dQ warp's lane 0 adds a tile with 4
//     cp.reduce.async.bulk.tensor (boxes of 64 rows x 32 columns; D = 64: 2 per partial) and hands the buffer
//     back once they have read it. In deterministic mode it alone waits for the query tile's turn, issues,
//     waits for the reduces to complete and passes the turn; the consumers go on with the other buffer (units
//     are fetched in list order, so a unit waits only on units fetched before it: no deadlock);
//   * the consumers' loop keeps no 64-bit index live (the masks come from 32-bit offsets computed per unit);
//   * order per tile (consumers): wait for the stage, S^T, dP^T | exps | dV | dS^T | barrier | dQ, dK issued |
//     dQ staged while dK runs; the stage is released once dK completed;
//   * epilogue: dK * scale and dV go through the same dQ buffers, 64 columns at a time (2 x D / 64 more tiles
//     of that ring), and the dQ warp adds them to dk_acc / dv_acc (or stores them, overwrite_dkv:
//     attn_bwd_block_fresh) with TMA tensor ops, while the producer loads the next unit's K / V and Q / dO;
//   * the unit list: causal items in windows of (batch, K/V head) pairs, largest first; a last partial wave of
//     equal items split into pieces that add partial dK / dV.
constexpr int kV5Threads = 384;
// setmaxnreg moves registers only within the CTA's launch allocation: 384 threads at 1 CTA per SM start with
// 168 each (65536 / 384 rounded down to a multiple of 8), so the consumers can rise only by what the producer
// warpgroup gives up (an inc beyond that blocks forever: 240 / 32 deadlocked on the first device run).
// Persistent (unit loop in every role), per D (ptxas -v, nvcc 13):
//   * D = 128: 240 / 24. At 232 / 40 ptxas serializes the wgmmas for want of registers (C7512): the backward lost
//     14% on the H200. 240 / 24 spills about 130 bytes, in the producer warpgroup's loops;
//   * D = 64: 232 / 40, 4 bytes of spill (240 / 24 spills about 180 bytes in the producer warpgroup).
template <int D>
constexpr int kV5ConsumerRegs = D == 128 ? 240 : 232;
template <int D>
constexpr int kV5ProducerRegs = D == 128 ? 24 : 40;
static_assert(kV5ConsumerRegs<128> * 256 + kV5ProducerRegs<128> * 128 <= 168 * kV5Threads &&
                  kV5ConsumerRegs<64> * 256 + kV5ProducerRegs<64> * 128 <= 168 * kV5Threads,
              "setmaxnreg: the consumers' registers must come from the producer warpgroup");
// Named barriers (tma_ops.cuh; 0 is __syncthreads).
constexpr int kBarDs = 1;        // D = 128: dS^T of both consumer warpgroups stored (256 threads)
constexpr int kBarDsWg = 2;      // D = 64: 2 + wg, dS^T of one consumer warpgroup stored (128 threads)
constexpr int kBarDqFull = 4;    // 4 + buffer: the consumers staged dQ there (256 + the dQ warp's 32)
constexpr int kBarDqEmpty = 6;   // 6 + buffer: the dQ warp's reduces finished reading it (256 + 32)
constexpr int kDqBarThreads = 256 + 32;
constexpr int kUnitReaders = 8 + 1;  // the consumer warps and the dQ warp release a unit-ring slot

template <int D>
struct WgBwdV5Smem {
  static constexpr uint32_t kKVBytes = kBc * D * 2;
  static constexpr uint32_t kQBytes = kBr * D * 2;
  static constexpr uint32_t kDsBytes = kBc * kBr * 2;
  // dQ staging, f32, 2 buffers of (4 column blocks, 64 queries, 32) in the 128-byte swizzle of the dq_acc
  // tensor map (16-byte chunk c of row r at c ^ (r & 7): a warp's float2 stores of 8 rows x 32 bytes hit
  // every bank twice, the minimum for 256 bytes). D = 128: blocks = columns 0-31 .. 96-127 of the tile;
  // D = 64: blocks 2w, 2w + 1 = columns 0-31, 32-63 of warpgroup w's partial (over its own 64 keys).
  static constexpr uint32_t kDqBlockBytes = kBr * 128;
  static constexpr uint32_t kDqBufBytes = 4 * kDqBlockBytes;
  static constexpr uint32_t kK = 0;
  static constexpr uint32_t kV = kK + kKVBytes;
  static constexpr uint32_t kQ = kV + kKVBytes;       // (2 stages, 64, D)
  static constexpr uint32_t kDo = kQ + 2 * kQBytes;   // (2 stages, 64, D)
  static constexpr uint32_t kDs = kDo + 2 * kQBytes;  // (2 stages, 128 keys, 64 queries)
  static constexpr uint32_t kDq = kDs + 2 * kDsBytes;  // (2 buffers, 4, 64, 32) f32 sw128
  static constexpr uint32_t kStats = kDq + 2 * kDqBufBytes;  // lse (2, 64), delta (2, 64) f32
  static constexpr uint32_t kBars = kStats + 4 * kBr * 4;  // full[2], empty[2], kv, kv_empty, unit_full[2],
                                                           // unit_empty[2] mbarriers
  static constexpr uint32_t kUnits = kBars + 10 * 8;       // the unit ring's 2 slots (int)
  static constexpr size_t kBytes = size_t(kUnits) + 8 + 1024;  // + alignment slack
  // The epilogue stages the CTA's f32 dK and dV 64 columns at a time in the dQ buffers: (2 warpgroups, 2 column
  // blocks, 64 keys, 32), in the sw128 layout of the dk / dv tensor maps.
  static_assert(kDqBufBytes == kBc * 64 * 4, "bwd v5: a dQ buffer must hold 128 keys x 64 columns f32");
  static_assert(kBytes <= 232448, "bwd v5: shared memory over the 227 KB an H100 / H200 block may use");
};


// bwd v5's list of units: items (one key tile of one (batch, K/V head) pair, bh = b * Hkv + hk) in windows of
// `window` pairs: window w holds pairs [w window, (w + 1) window) key tile by key tile (the pairs fastest), so
// within a window the causal items, largest at key tile 0, start largest first, and a window's Q / dO / dQ stay
// in L2. Unit u < full_items is item u whole; with pieces > 1 the units after those split each remaining item
// (the last, partial wave of a list of equal items) into `pieces` ranges of its iterations, which add their
// partial dK / dV with TMA reduces, so the last wave no longer leaves most SMs idle while a few items run. The
// persistent CTAs take the units in list order.
struct BwdV5Grid {
  int64_t n_kt;        // key tiles per (batch, K/V head)
  int64_t n_bh;        // (batch, K/V head) pairs
  int64_t window;      // pairs per window (1: pair by pair, key tile fastest)
  int64_t full_items;  // items run whole, one per CTA
  int pieces;          // > 1: units past full_items are pieces of the remaining items; else none are split
  int64_t units;       // full_items + the pieces: the units the CTAs fetch
  int64_t ctas;        // CTAs launched (at most one per SM); unit c < ctas is CTA c's first
};

struct BwdItem {
  int64_t kt, hk, b;
};
__device__ __forceinline__ BwdItem bwd_item(const BwdV5Grid& g, int64_t Hkv, int64_t item) {
  const int64_t per_window = g.window * g.n_kt, w = item / per_window, rem = item % per_window;
  const int64_t width = g.n_bh - w * g.window < g.window ? g.n_bh - w * g.window : g.window;
  const int64_t bh = w * g.window + rem % width;
  return BwdItem{rem / width, bh % Hkv, bh / Hkv};
}

template <int D>
__device__ __forceinline__ void zero_dk_dv_rows(const AttnBwdParams& p, int64_t k0, int64_t b, int64_t hk, int tid,
                                                int threads);

// Overwrite mode with a split tail: zeroes the split items' dK / dV rows before their pieces add into them (one
// CTA per item, launched on the same stream before the kernel).
template <int D>
__global__ void zero_split_items_kernel(const AttnBwdParams p, const BwdV5Grid grid) {
  const BwdItem w = bwd_item(grid, p.Hkv, grid.full_items + blockIdx.x);
  zero_dk_dv_rows<D>(p, p.k_begin + w.kt * kBc, w.b, w.hk, int(threadIdx.x), int(blockDim.x));
}

// One unit of bwd v5's work, as every role decodes it from its index: an item (one key tile of one (batch, K/V
// head) pair), or with pieces > 1 past full_items one piece of an item's iterations.
struct BwdUnit {  // 32-bit: the launcher checks that k_end, q_end and H fit (TMA coordinates are 32-bit)
  int kt, hk, b, k0, q_first;
  int n_qt, it_begin, n_iter;  // n_iter == 0: no query sees these keys
  bool piece;
};
__device__ __forceinline__ BwdUnit bwd_unit(const AttnBwdParams& p, const BwdV5Grid& grid, int64_t u) {
  BwdUnit x;
  x.piece = u >= grid.full_items;
  const int64_t item = x.piece ? grid.full_items + (u - grid.full_items) / grid.pieces : u;
  const BwdItem w = bwd_item(grid, p.Hkv, item);
  x.kt = int(w.kt);
  x.hk = int(w.hk);
  x.b = int(w.b);
  const int64_t k0 = p.k_begin + w.kt * kBc, q_first = first_query_tile_row<kBr>(p, k0);
  x.k0 = int(k0);
  x.q_first = int(q_first);
  x.n_qt = x.it_begin = x.n_iter = 0;
  if (q_first >= p.q_end) return x;
  x.n_qt = int((p.q_end - q_first + kBr - 1) / kBr);
  // This unit's iterations [it_begin, it_begin + n_iter) of the item's group * n_qt (query head, query tile) pairs.
  const int item_iters = int(p.group) * x.n_qt;
  const int part = x.piece ? int((u - grid.full_items) % grid.pieces) : 0, parts = x.piece ? grid.pieces : 1;
  x.it_begin = int(int64_t(part) * item_iters / parts);
  x.n_iter = int(int64_t(part + 1) * item_iters / parts) - x.it_begin;
  return x;
}

// Every role's next unit, from the producer's 2-slot ring (fetch f in slot f & 1; -1: none left). Lane 0 of each
// reading warp releases the slot once the whole warp has read it.
__device__ __forceinline__ int read_unit(const int* slots, uint32_t unit_full_bar, uint32_t unit_empty_bar, int f,
                                         int lane) {
  const uint32_t s = uint32_t(f & 1);
  mbar_wait(unit_full_bar + 8 * s, uint32_t(f >> 1) & 1u);
  const int u = *reinterpret_cast<const volatile int*>(slots + s);
  __syncwarp();
  if (lane == 0) mbar_arrive(unit_empty_bar + 8 * s);
  return u;
}

// dQ buffer `sb` (0 or 1) handshakes between the consumers (256 threads) and the dQ warp, with immediate barrier
// ids (ptxas then reserves only these).
__device__ __forceinline__ void dq_buffer_sync_empty(int sb) {
  if (sb == 0) named_bar_sync(kBarDqEmpty, kDqBarThreads);
  else named_bar_sync(kBarDqEmpty + 1, kDqBarThreads);
}
__device__ __forceinline__ void dq_buffer_arrive_empty(int sb) {
  if (sb == 0) named_bar_arrive(kBarDqEmpty, kDqBarThreads);
  else named_bar_arrive(kBarDqEmpty + 1, kDqBarThreads);
}
__device__ __forceinline__ void dq_buffer_sync_full(int sb) {
  if (sb == 0) named_bar_sync(kBarDqFull, kDqBarThreads);
  else named_bar_sync(kBarDqFull + 1, kDqBarThreads);
}
__device__ __forceinline__ void dq_buffer_arrive_full(int sb) {
  if (sb == 0) named_bar_arrive(kBarDqFull, kDqBarThreads);
  else named_bar_arrive(kBarDqFull + 1, kDqBarThreads);
}

// The epilogue as 2 x D / 64 more tiles of the dQ ring: tile c (c < D / 64) holds dK * scale columns
// [64c, 64c + 64) of the CTA's 128 keys, tile D / 64 + c the same columns of dV; warpgroup w stages its 64 keys in
// blocks 2w, 2w + 1 (as its dQ half), and the dQ warp writes the 4 boxes to dk / dv (kEpilogueTiles, below).
template <int D, int C>
__device__ __forceinline__ void stage_dkv_tile(const float (&x)[D / 2], float scale, uint32_t dq_bufs, uint32_t& jq,
                                               int wg, int warp, int g, int t) {
  const int sb = int(jq & 1u);
  dq_buffer_sync_empty(sb);
  stage_rows_f32_sw128<8, 32 * C>(dq_bufs + uint32_t(sb) * WgBwdV5Smem<D>::kDqBufBytes +
                                      uint32_t(2 * wg) * WgBwdV5Smem<D>::kDqBlockBytes,
                                  x, scale, warp, g, t);
  fence_proxy_async_smem();  // the dQ warp's TMA reads the buffer through the async proxy
  dq_buffer_arrive_full(sb);
  ++jq;
}

template <int D>
__global__ void __launch_bounds__(kV5Threads, 1)
    attn_bwd_wgmma_v5_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                             const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                             const __grid_constant__ CUtensorMap tm_dq, const __grid_constant__ CUtensorMap tm_dk,
                             const __grid_constant__ CUtensorMap tm_dv, const AttnBwdParams p,
                             const BwdV5Grid grid, int* next_unit) {
#if RT_WGMMA_AVAILABLE
  static_assert(D == 64 || D == 128, "wgmma backward: D must be 64 or 128");
  using Smem = WgBwdV5Smem<D>;
  constexpr int kEpilogueTiles = 2 * D / 64;  // dK, then dV, 64 columns each
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t k_tile = base + Smem::kK, v_tile = base + Smem::kV;
  const uint32_t q_tiles = base + Smem::kQ, do_tiles = base + Smem::kDo, ds_tiles = base + Smem::kDs;
  const uint32_t dq_bufs = base + Smem::kDq;  // (2, 4, 64, 32) f32 sw128
  float* lse_s = reinterpret_cast<float*>(smem_raw + (base - raw) + Smem::kStats);  // (2, 64)
  float* delta_s = lse_s + 2 * kBr;                                                 // (2, 64)
  int* unit_slots = reinterpret_cast<int*>(smem_raw + (base - raw) + Smem::kUnits);  // (2)
  const uint32_t full_bar = base + Smem::kBars, empty_bar = full_bar + 16;  // Q / dO stages, 2 x 8 bytes each
  const uint32_t kv_bar = full_bar + 32;        // K and V landed
  const uint32_t kv_empty_bar = full_bar + 40;  // the consumers read K and V no more (256 arrivals)
  const uint32_t unit_full_bar = full_bar + 48, unit_empty_bar = full_bar + 64;  // the unit ring, 2 x 8 each

  const int tid = int(threadIdx.x);
  // wg through a shuffle: the compiler then knows it is warp-uniform, so the smem addresses and wgmma descriptors
  // derived from it can live in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  if (tid == 0) {
    mbar_init(full_bar, 32);
    mbar_init(full_bar + 8, 32);
    mbar_init(empty_bar, 256);
    mbar_init(empty_bar + 8, 256);
    mbar_init(kv_bar, 1);
    mbar_init(kv_empty_bar, 256);
    mbar_init(unit_full_bar, 1);
    mbar_init(unit_full_bar + 8, 1);
    mbar_init(unit_empty_bar, kUnitReaders);
    mbar_init(unit_empty_bar + 8, kUnitReaders);
    mbar_init_fence();
  }
  __syncthreads();  // mbarriers initialized

  if (wg == 2) {
    setmaxnreg_dec<kV5ProducerRegs<D>>();
    if (warp == 0) {
      // Producer: fetches the units (the first is blockIdx.x, then a global counter hands them out in order) and
      // publishes each in the unit ring; per unit with work: Q, dO (TMA, lane 0), lse, delta (all lanes) of each
      // iteration into stage J & 1 of a ring that runs on across units, and K / V (TMA, lane 0, their own
      // barrier) once the first stage is in flight and the consumers are done with the previous unit's K / V.
      if (lane == 0) {
        tma_prefetch_desc(&tm_q);
        tma_prefetch_desc(&tm_do);
        tma_prefetch_desc(&tm_k);
        tma_prefetch_desc(&tm_v);
      }
      uint32_t J = 0;  // stages issued so far
      int kv_loads = 0;
      int u = int(blockIdx.x);
#pragma unroll 1
      for (int f = 0;; ++f) {
        if (lane == 0) {
          if (f >= 2) mbar_wait(unit_empty_bar + 8 * (f & 1), uint32_t((f >> 1) - 1) & 1u);
          unit_slots[f & 1] = u < grid.units ? u : -1;
          mbar_arrive(unit_full_bar + 8 * (f & 1));
        }
        if (u >= grid.units) break;
        const BwdUnit w = bwd_unit(p, grid, u);
#pragma unroll 1
        for (int j = 0; j < w.n_iter; ++j, ++J) {
          const int it = w.it_begin + j;
          const uint32_t st = J & 1u;
          if (J >= 2) mbar_wait(empty_bar + 8 * st, ((J >> 1) - 1u) & 1u);
          const int h = w.hk * int(p.group) + it / w.n_qt;
          const int q0 = w.q_first + (it % w.n_qt) * kBr;
          const int64_t stats_row = (int64_t(w.b) * p.H + h) * p.Nq + q0;
          const float* lse_src = p.lse + stats_row;
          const float* delta_src = p.delta + stats_row;
#pragma unroll
          for (int r = lane; r < kBr; r += 32) {  // rows past q_end: 0 (they are masked)
            const bool ok = q0 + r < p.q_end;
            lse_s[st * kBr + r] = ok ? lse_src[r] : 0.f;
            delta_s[st * kBr + r] = ok ? delta_src[r] : 0.f;
          }
          if (lane == 0) {  // the stage's barrier completes with 32 arrivals and the bytes of both tiles
            const uint32_t bar = full_bar + 8 * st;
            mbar_arrive_expect_tx(bar, 2 * Smem::kQBytes);
#pragma unroll
            for (int c = 0; c < D / 64; ++c) {
              tma_load_4d(q_tiles + st * Smem::kQBytes + uint32_t(c) * (kBr * 128), &tm_q, bar, c * 64, h, q0,
                          int(w.b));
              tma_load_4d(do_tiles + st * Smem::kQBytes + uint32_t(c) * (kBr * 128), &tm_do, bar, c * 64, h, q0,
                          int(w.b));
            }
            if (j == 0) {  // K and V (one barrier), once the previous unit's are read no more
              if (kv_loads > 0) mbar_wait(kv_empty_bar, uint32_t(kv_loads - 1) & 1u);
              mbar_arrive_expect_tx(kv_bar, 2 * Smem::kKVBytes);
#pragma unroll
              for (int c = 0; c < D / 64; ++c) {
                tma_load_4d(k_tile + uint32_t(c) * (kBc * 128), &tm_k, kv_bar, c * 64, int(w.hk), int(w.k0), int(w.b));
                tma_load_4d(v_tile + uint32_t(c) * (kBc * 128), &tm_v, kv_bar, c * 64, int(w.hk), int(w.k0), int(w.b));
              }
            }
          } else {
            mbar_arrive(full_bar + 8 * st);
          }
        }
        if (w.n_iter > 0) ++kv_loads;
        int next = 0;
        if (lane == 0) next = int(grid.ctas) + atomicAdd(next_unit, 1);
        u = __shfl_sync(0xffffffffu, next, 0);
      }
    } else if (warp == 1) {
      // dQ warp: per unit, the staged dQ tiles into dq_acc with TMA tensor reduces (lane 0), then the unit's
      // epilogue tiles into dk / dv (TMA stores when overwriting, else reduces). The buffers' empty barriers
      // get 2 arrivals up front and one after each tile; the consumers sync once per tile and twice at the end.
      if (lane == 0) {
        tma_prefetch_desc(&tm_dq);
        tma_prefetch_desc(&tm_dk);
        tma_prefetch_desc(&tm_dv);
      }
      dq_buffer_arrive_empty(0);
      dq_buffer_arrive_empty(1);
      uint32_t jq = 0;  // dQ-ring tiles so far
#pragma unroll 1
      for (int f = 0;; ++f) {
        const int u = read_unit(unit_slots, unit_full_bar, unit_empty_bar, f, lane);
        if (u < 0) break;
        const BwdUnit w = bwd_unit(p, grid, u);
        if (w.n_iter == 0) continue;
        const int mine = w.kt;  // deterministic mode never splits: the unit is the whole key tile
#pragma unroll 1
        for (int j = 0; j < w.n_iter; ++j, ++jq) {
          const int it = w.it_begin + j, sb = int(jq & 1u);
          dq_buffer_sync_full(sb);
          if (lane == 0) {
            const int h = w.hk * int(p.group) + it / w.n_qt;
            const int q0 = w.q_first + (it % w.n_qt) * kBr;
            // The tile's coordinates (as the producer computes them) and, in deterministic mode, its turn counter.
            const int64_t q_tiles_per_head = (p.q_end - p.q_begin + kBr - 1) / kBr;
            int* turn = p.dq_turn == nullptr
                            ? nullptr
                            : p.dq_turn + (int64_t(w.b) * p.H + h) * q_tiles_per_head + (q0 - p.q_begin) / kBr;
            if (turn != nullptr) {
              int seen;
              do {
                asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(turn) : "memory");
              } while (seen != mine);
              fence_proxy_async_global();
            }
            const uint32_t buf = dq_bufs + uint32_t(sb) * Smem::kDqBufBytes;
#pragma unroll
            for (int blk = 0; blk < 4; ++blk) {  // D = 64: blocks 0, 1 = partial 0; 2, 3 = partial 1
              tma_reduce_add_4d(&tm_dq, buf + uint32_t(blk) * Smem::kDqBlockBytes, (blk * 32) % D, h, q0, int(w.b));
              if (D == 64 && blk == 1 && turn != nullptr) {  // partial 0 before partial 1, on every run
                bulk_commit();
                bulk_wait<0>();
              }
            }
            bulk_commit();
            if (turn != nullptr) {
              bulk_wait<0>();
              fence_proxy_async_global();
              __threadfence();
              asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(turn), "r"(mine + 1) : "memory");
            } else {
              bulk_wait_read<0>();
            }
          }
          __syncwarp();
          dq_buffer_arrive_empty(sb);
        }
        // Pieces add into rows zeroed before the kernel; rows past k_end are skipped by the tensor maps.
        const bool store_dkv = p.overwrite_dkv && !w.piece;
#pragma unroll 1
        for (int e = 0; e < kEpilogueTiles; ++e, ++jq) {
          const int sb = int(jq & 1u);
          dq_buffer_sync_full(sb);
          if (lane == 0) {
            const CUtensorMap* tm = e < D / 64 ? &tm_dk : &tm_dv;
            const int col0 = (e % (D / 64)) * 64;
            const uint32_t buf = dq_bufs + uint32_t(sb) * Smem::kDqBufBytes;
#pragma unroll
            for (int blk = 0; blk < 4; ++blk) {  // block 2w + c: keys 64w.., columns col0 + 32c..
              const uint32_t src = buf + uint32_t(blk) * Smem::kDqBlockBytes;
              const int col = col0 + (blk % 2) * 32, row = int(w.k0) + (blk / 2) * 64;
              if (store_dkv) tma_store_4d(tm, src, col, int(w.hk), row, int(w.b));
              else tma_reduce_add_4d(tm, src, col, int(w.hk), row, int(w.b));
            }
            bulk_commit();
            bulk_wait_read<0>();
          }
          __syncwarp();
          dq_buffer_arrive_empty(sb);
        }
      }
      if (lane == 0) bulk_wait<0>();  // every write performed before the CTA ends
    }
    return;
  }
  setmaxnreg_inc<kV5ConsumerRegs<D>>();

  const int krow0 = wg * 64 + warp * 16 + g;
  float dk[D / 2], dv[D / 2];
  float s[32], dp[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = dp[i] = 0.f;
  const uint32_t k_wg = k_tile + uint32_t(wg) * 64 * 128, v_wg = v_tile + uint32_t(wg) * 64 * 128;
  uint32_t J = 0, jq = 0;  // Q / dO stages and dQ-ring tiles so far
  int kv_loads = 0;
#pragma unroll 1
  for (int f = 0;; ++f) {
    const int u = read_unit(unit_slots, unit_full_bar, unit_empty_bar, f, lane);
    if (u < 0) break;
    const BwdUnit w = bwd_unit(p, grid, u);
    if (w.n_iter == 0) {  // no query sees these keys: their gradients are zero
      if (p.overwrite_dkv && !w.piece) zero_dk_dv_rows<D>(p, w.k0, w.b, w.hk, tid, 256);
      continue;
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
    // The masks' limits as 32-bit offsets from (q_first + qi, k0) (see TileMask), so no 64-bit index stays live
    // across the loop (at 240 registers they spilled): q_span <= q_end <= INT_MAX (the launcher checks).
    const int q_span = int(p.q_end - w.q_first), k_lim = clamp_rel(p.k_end - w.k0);
    const int64_t diag0 = int64_t(w.q_first) + p.diag - w.k0;
    const int n_qt = w.n_qt, it_begin = w.it_begin, n_iter = w.n_iter;
    mbar_wait(kv_bar, uint32_t(kv_loads) & 1u);
    ++kv_loads;
#pragma unroll 1
    for (int j = 0; j < n_iter; ++j, ++J, ++jq) {
      const int it = it_begin + j;
      const uint32_t st = J & 1u;
      const int qi = (it % n_qt) * kBr;  // the tile's first row, from q_first
      const TileMask mask{q_span - qi, k_lim, clamp_rel(diag0 + qi), p.causal};
      const uint32_t qs = q_tiles + st * Smem::kQBytes, dos = do_tiles + st * Smem::kQBytes;
      const uint32_t ds_tile = ds_tiles + st * Smem::kDsBytes;
      const float* lse_t = lse_s + st * kBr;
      const float* delta_t = delta_s + st * kBr;
      mbar_wait(full_bar + 8 * st, (J >> 1) & 1u);  // this stage's Q, dO, lse, delta landed

      // S^T = K Q^T and dP^T = V dO^T.
      wgmma_fence_regs(s);
      wgmma_fence_regs(dp);
      wgmma_fence();
      issue_kq<D>(s, k_wg, qs);
      wgmma_commit();
      issue_kq<D>(dp, v_wg, dos);
      wgmma_commit();
      wgmma_wait<1>();  // S^T done; dP^T may still run
      wgmma_fence_regs(s);

      const bool need_mask = mask.q_lim < kBr || mask.k_lim < kBc || (mask.causal && kBc - 1 > mask.diag);
      compute_pt(s, p.scale2, lse_t, mask, krow0, need_mask, t);
      uint32_t pf[16], df[16];  // P^T and dS^T as bf16 A fragments
      issue_dv_wait_dp<D>(s, dp, dv, pf, dos);
      compute_dst_store_packed(dp, df, s, delta_t, ds_tile, krow0, t);
      fence_proxy_async_smem();
      if constexpr (D == 128) named_bar_sync(kBarDs, 256);
      else if (wg == 0) named_bar_sync(kBarDsWg, 128);  // immediate ids: ptxas then reserves only these
      else named_bar_sync(kBarDsWg + 1, 128);

      wgmma_wait<0>();  // dV done (it ran while dS^T was formed): P^T's registers are free
      wgmma_fence_regs(dv);
      fence_regs_u32(pf);

      // dQ (64 queries x 64 columns) = dS K: D = 128 this warpgroup's half of D over all keys; D = 64 all of D
      // over this warpgroup's keys (a partial). dK += dS^T Q runs behind it and during the staging.
      float dq[32];  // dq[nt*4 + 2r + e] = (query warp*16 + g + 8r, column nt*8 + 2t + e of this warpgroup's part)
#pragma unroll
      for (int i = 0; i < 32; ++i) dq[i] = 0.f;
      wgmma_fence_regs(dq);
      wgmma_fence_regs(dk);
      fence_regs_u32(df);
      wgmma_fence();
      if constexpr (D == 128) issue_dq<kBc>(dq, ds_tile, k_tile + uint32_t(wg) * (kBc * 128));
      else issue_dq<64>(dq, ds_tile + uint32_t(wg) * 64 * 128, k_tile + uint32_t(wg) * 64 * 128);
      wgmma_commit();
      issue_acc<D>(dk, df, qs);
      wgmma_commit();
      wgmma_wait<1>();  // dQ done; dK may still run
      wgmma_fence_regs(dq);

      // Stage dQ * scale into buffer jq & 1: D = 128 columns wg*64.. of the (64, 128) tile (blocks 2wg, 2wg + 1);
      // D = 64 partial wg (blocks 2wg, 2wg + 1). Column nt*8 + 2t of the warpgroup's 64 is in block 2wg + nt/4,
      // 16-byte chunk (nt%4)*2 + t/2, swizzled with the row (row & 7 = g).
      const int sb = int(jq & 1u);
      const uint32_t stage = dq_bufs + uint32_t(sb) * Smem::kDqBufBytes + uint32_t(2 * wg) * Smem::kDqBlockBytes;
      dq_buffer_sync_empty(sb);
      stage_rows_f32_sw128<8>(stage, dq, p.scale, warp, g, t);
      fence_proxy_async_smem();  // the tensor reduces read the buffer through the async proxy
      dq_buffer_arrive_full(sb);

      wgmma_wait<0>();  // dK done (it ran during the staging)
      wgmma_fence_regs(dk);
      fence_regs_u32(df);
      mbar_arrive(empty_bar + 8 * st);  // this tile's Q / dO are no longer read
    }
    // Epilogue: this thread's MMAs are done (its last wgmma_wait<0>), so K / V may take the next unit's tiles
    // while dK * scale and dV go through the dQ ring (kEpilogueTiles tiles of 64 columns) to the dQ warp.
    mbar_arrive(kv_empty_bar);
    stage_dkv_tile<D, 0>(dk, p.scale, dq_bufs, jq, wg, warp, g, t);
    if constexpr (D == 128) stage_dkv_tile<D, 1>(dk, p.scale, dq_bufs, jq, wg, warp, g, t);
    stage_dkv_tile<D, 0>(dv, 1.f, dq_bufs, jq, wg, warp, g, t);
    if constexpr (D == 128) stage_dkv_tile<D, 1>(dv, 1.f, dq_bufs, jq, wg, warp, g, t);
  }
  // The dQ warp's last two arrivals on the empty barriers: its reads of both buffers are done.
  dq_buffer_sync_empty(int(jq & 1u));
  dq_buffer_sync_empty(int((jq + 1u) & 1u));
#else
  __trap();
#endif
}

}  // namespace

bool attn_bwd_wgmma_supported(int device, int64_t D) {
  if (D != 128 && D != 64) return false;
  static int cached[16][2] = {};  // per device and D (128, 64): 0 unknown, 1 supported, 2 not
  int& c = cached[device & 15][D == 64 ? 1 : 0];
  if (c == 0) {
    const bool ok = D == 64 ? wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_bwd_wgmma_kernel<64>))
                            : wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_bwd_wgmma_kernel<128>));
    c = ok ? 1 : 2;
  }
  return c == 1;
}

namespace {

// bwd v5's unit list for n_kt x n_bh items. Causal: windows of pairs whose Q, dO (bf16) and dQ (f32) take at
// most 16 MB (the H200 has 50 MB of L2, in two partitions), so that large items start before small ones across
// several pairs and the last items to start are small (one pair per window at d128 4K left a tail of 3.4% on a
// grid of one CTA per item). An A/B of the budget (persistent kernel, 2 rounds, d128 causal bwd TF/s): 4K 32 MB
// 419 / 415, 16 MB 444 / 435, 8 MB 428 / 411, one pair 432 / 423; 16K within 3% for all four; d64 flat. Not
// causal: the remainder of items over the SMs (one CTA per SM) is the last wave; when it is at most half the SMs
// and the dQ adds need no order (not deterministic), each remaining item is split into up to SMs / remainder
// pieces (at most its iterations).
BwdV5Grid v5_grid(const AttnBwdParams& p, int64_t D, int64_t n_bh, int64_t n_kt, int n_sm) {
  const int64_t items = n_bh * n_kt;
  BwdV5Grid g{n_kt, n_bh, 1, items, 1, items, 0};
  if (p.causal && p.dq_turn != nullptr) {
    // Deterministic: a unit's dQ adds wait for every earlier key tile of its pair, and key tile 0 reaches query
    // tile q only after q of its own tiles, so the units running at once should come from as many pairs as
    // possible: one window of every pair (a window of one pair at d128 16K: 180 TF/s causal instead of 359).
    g.window = n_bh;
  } else if (p.causal) {
    const int64_t pair_bytes = (p.q_end - p.q_begin) * p.group * D * 8;
    g.window = std::max<int64_t>(1, std::min<int64_t>(n_bh, (int64_t(16) << 20) / std::max<int64_t>(pair_bytes, 1)));
  } else {
    const int64_t rem = items % n_sm;
    const int64_t item_iters = p.group * ((p.q_end - p.q_begin + kBr - 1) / kBr);
    const int64_t pieces = std::min<int64_t>(n_sm / std::max<int64_t>(rem, 1), item_iters);
    if (p.dq_turn == nullptr && items >= n_sm && rem != 0 && 2 * rem <= n_sm && pieces >= 2) {
      g.full_items = items - rem;
      g.pieces = int(pieces);
      g.units = g.full_items + rem * pieces;
    }
  }
  g.ctas = std::min<int64_t>(g.units, n_sm);
  return g;
}

// The counter from which bwd v5's CTAs fetch their units after the first, per device, zeroed on the stream before
// each launch (so, like the deterministic turn counters, one launch at a time per device).
int* bwd_unit_counter(int device, cudaStream_t stream) {
  static std::mutex mutex;
  static int* counters[16] = {};
  std::lock_guard<std::mutex> lock(mutex);
  int*& c = counters[device & 15];
  if (c == nullptr) CUDA_CHECK(cudaMalloc(&c, sizeof(int)));
  CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(int), stream));
  return c;
}

template <int D, bool V5>
void launch_for_d(const AttnBwdParams& p, int64_t B, int device, cudaStream_t stream) {
  constexpr size_t smem = V5 ? WgBwdV5Smem<D>::kBytes : WgBwdSmem<D>::kBytes;
  static bool configured[16] = {};  // the shared-memory opt-in is per device (and per kernel)
  if (!configured[device & 15]) {
    if constexpr (V5)
      CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_wgmma_v5_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)));
    else
      CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_wgmma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)));
    configured[device & 15] = true;
  }
  const int64_t tiles = (p.k_end - p.k_begin + kBc - 1) / kBc;
  RT_CHECK(tiles <= INT_MAX, "attn_bwd_block: too many key rows (" << p.k_end - p.k_begin << ")");
  if constexpr (V5) {
    RT_CHECK(p.q_end <= INT_MAX && p.k_end <= INT_MAX && p.H <= INT_MAX,
             "attn_bwd_block (v5): TMA coordinates are 32-bit; Nq = " << p.Nq << ", Nk = " << p.Nk << ", H = " << p.H
                 << "; split the call into query / key sub-ranges (AttnMask q_begin / k_begin) under 2^31 rows");
    const CUtensorMap tq = make_rows_heads_tma_map(p.q, B, p.Nq, p.q_end, p.H, D, kBr);
    const CUtensorMap tdo = make_rows_heads_tma_map(p.dout, B, p.Nq, p.q_end, p.H, D, kBr);
    const CUtensorMap tk = make_rows_heads_tma_map(p.k, B, p.Nk, p.k_end, p.Hkv, D, kBc);
    const CUtensorMap tv = make_rows_heads_tma_map(p.v, B, p.Nk, p.k_end, p.Hkv, D, kBc);
    const CUtensorMap tdq = make_rows_heads_tma_map(p.dq, B, p.Nq, p.q_end, p.H, D, kBr, 4);
    const CUtensorMap tdk = make_rows_heads_tma_map(p.dk, B, p.Nk, p.k_end, p.Hkv, D, kBr, 4);
    const CUtensorMap tdv = make_rows_heads_tma_map(p.dv, B, p.Nk, p.k_end, p.Hkv, D, kBr, 4);
    static int sms[16] = {};
    int& n_sm = sms[device & 15];
    if (n_sm == 0) CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, device));
    const BwdV5Grid g = v5_grid(p, D, p.Hkv * B, tiles, n_sm);
    RT_CHECK(g.units + g.ctas <= INT_MAX, "attn_bwd_block (v5): " << g.units << " work units (key tiles x batch x "
                                              "K/V heads) do not fit 32 bits; split the batch or the key range");
    if (g.pieces > 1 && p.overwrite_dkv) {
      zero_split_items_kernel<D><<<unsigned((g.units - g.full_items) / g.pieces), 256, 0, stream>>>(p, g);
      CUDA_CHECK_LAUNCH();
    }
    int* next_unit = bwd_unit_counter(device, stream);
    attn_bwd_wgmma_v5_kernel<D>
        <<<unsigned(g.ctas), kV5Threads, smem, stream>>>(tq, tdo, tk, tv, tdq, tdk, tdv, p, g, next_unit);
  } else {
    const dim3 grid(unsigned(tiles), unsigned(p.Hkv), unsigned(B));
    attn_bwd_wgmma_kernel<D><<<grid, kWgBwdThreads, smem, stream>>>(p);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attn_bwd_wgmma(const AttnBwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream,
                           int variant) {
  RT_CHECK(D == 128 || D == 64,
           "attn_bwd_block (wgmma): head dim " << D << " is not 64 or 128; use the mma.sync kernel");
  RT_CHECK(variant == 4 || variant == 5, "attn_bwd_block (wgmma): variant " << variant << " is not 4 or 5");
  if (variant == 5 && !attn_bwd_v5_fits(p.q_end, p.k_end)) variant = 4;  // v4 has the same contract
  RT_CHECK(variant == 5 || !p.overwrite_dkv, "attn_bwd_block (wgmma): only v5 overwrites dK / dV (q_end = "
                                                 << p.q_end << ", k_end = " << p.k_end << ", variant " << variant << ")");
  if (variant == 5) D == 64 ? launch_for_d<64, true>(p, B, device, stream) : launch_for_d<128, true>(p, B, device, stream);
  else D == 64 ? launch_for_d<64, false>(p, B, device, stream) : launch_for_d<128, false>(p, B, device, stream);
}

}  // namespace cuda
}  // namespace rt
