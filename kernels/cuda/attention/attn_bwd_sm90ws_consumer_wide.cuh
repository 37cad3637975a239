// bwd v5's consumers on 128-query tiles (D = 64 without documents or turn counters: kV5WideRows), FA4's tile at
// this head dim. Included by attn_bwd_sm90ws.cu only; keep C++17. Per (128 queries x 128 keys) tile, warpgroup w owns
// keys [64w, 64w + 64) for S^T, dP^T, dV and dK (m64n128 / k = 128 wgmmas), and queries [64w, 64w + 64) for dQ over
// all 128 keys, so a tile adds one (128, 64) dQ instead of two (64, 64) partials per 64 queries: half the dQ
// staging and reduce traffic per FLOP of the 64-query tile, at the price of the two warpgroups meeting per tile.
// Registers: dK, dV (32 each), S^T, dP^T (64 each) and the tile's 32 query statistics at the peak (224 of 232), so
// dS^T is formed in place of dP^T in f32 and packed only when P^T's f32 values are dead, and dV is issued after it
// (the 64-query tile issues dV before forming dS^T).
#pragma once
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_units.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace wgbwd {

constexpr int kBarDsFree = 2;  // 128 queries: both warpgroups' dQ MMAs of the last tile read dS^T no more (256)

template <int D>
__device__ __forceinline__ void bwd_v5_consumer_wide(const AttnBwdParams& p, const BwdV5Grid& grid,
                                                     const BwdV5Shared& sh, int tid, int wg, int warp, int lane,
                                                     int g, int t) {
  static_assert(D == 64, "bwd v5: 128-query tiles at D = 64 only");
  constexpr int R = kV5WideRows<D>;
  using Smem = WgBwdV5Smem<D, R>;
  const uint32_t k_tile = sh.k_tile, v_tile = sh.v_tile, q_tiles = sh.q_tiles, do_tiles = sh.do_tiles;
  const uint32_t ds_tile = sh.ds_tiles, dq_bufs = sh.dq_bufs;  // dS^T: one stage of (128 keys, 128 queries)
  const float* const lse_s = sh.lse_s;
  const float* const delta_s = sh.delta_s;
  const uint32_t full_bar = sh.full_bar, empty_bar = sh.empty_bar, kv_bar = sh.kv_bar, kv_empty_bar = sh.kv_empty_bar;

  const int krow0 = wg * 64 + warp * 16 + g;
  const uint32_t ds_row = ds_row_offset(wg, warp, lane);  // this lane's dS^T stmatrix row
  float dk[D / 2], dv[D / 2];
  float s[R / 2], dp[R / 2];  // S^T then P^T; dP^T then dS^T: (64 keys x 128 queries) per warpgroup
#pragma unroll
  for (int i = 0; i < R / 2; ++i) s[i] = dp[i] = 0.f;
  const uint32_t k_wg = k_tile + uint32_t(wg) * 64 * 128, v_wg = v_tile + uint32_t(wg) * 64 * 128;
  uint32_t J = 0, jq = 0;  // Q / dO stages and dQ-ring tiles so far
  int kv_loads = 0;
#pragma unroll 1
  for (int f = 0;; ++f) {
    const int u = read_unit(sh.unit_slots, sh.unit_full_bar, sh.unit_empty_bar, f, lane);
    if (u < 0) break;
    const BwdUnit w = bwd_unit<false, R>(p, grid, u);
    if (w.n_iter == 0) {  // no query sees these keys: their gradients are zero
      if (p.overwrite_dkv && !w.piece) zero_dk_dv_rows<D>(p, w.k0, w.b, w.hk, tid, 256);
      continue;
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
    const int q_span = int(p.q_end - w.q_first), k_lim = clamp_rel(p.k_end - w.k0);  // as bwd_v5_consumer
    const int64_t diag0 = int64_t(w.q_first) + p.diag - w.k0;
    const int n_qt = w.n_qt, n_iter = w.n_iter;
    int qt = w.it_begin % n_qt;
    mbar_wait(kv_bar, uint32_t(kv_loads) & 1u);
    ++kv_loads;
#pragma unroll 1
    for (int j = 0; j < n_iter; ++j, ++J, ++jq) {
      const uint32_t st = J & 1u;
      const int qi = qt * R;
      qt = qt + 1 == n_qt ? 0 : qt + 1;
      const TileMask mask{q_span - qi, k_lim, clamp_rel(diag0 + qi), p.causal};
      const uint32_t qs = q_tiles + st * Smem::kQBytes, dos = do_tiles + st * Smem::kQBytes;
      const float* lse_t = lse_s + st * R;
      const float* delta_t = delta_s + st * R;
      mbar_wait(full_bar + 8 * st, (J >> 1) & 1u);  // this stage's Q, dO, lse, delta landed

      float2 lse_a[8], lse_b[8];  // lse * log2e of query groups 0-7 / 8-15, read before the MMAs are issued
      load_query_stats<8, 0>(lse_a, lse_t, t);
      load_query_stats<8, 8>(lse_b, lse_t, t);
      wgmma_fence_regs(s);
      wgmma_fence_regs(dp);
      wgmma_fence();
      issue_kq<D, R>(s, k_wg, qs);
      wgmma_commit();
      issue_kq<D, R>(dp, v_wg, dos);
      wgmma_commit();
      wgmma_wait<1>();  // S^T done; dP^T may still run
      wgmma_fence_regs(s);
      const bool need_mask = mask.q_lim < R || mask.k_lim < kBc || (mask.causal && kBc - 1 > mask.diag);
      compute_pt_from_regs<8, 0>(s, p.scale2, lse_a, mask, krow0, need_mask, t);
      compute_pt_from_regs<8, 8>(s, p.scale2, lse_b, mask, krow0, need_mask, t);
      float2 dl_a[8], dl_b[8];  // delta of query groups 0-7 / 8-15, read under dP^T
      load_query_stats<8, 0>(dl_a, delta_t, t);
      load_query_stats<8, 8>(dl_b, delta_t, t);
      wgmma_wait<0>();  // dP^T done
      wgmma_fence_regs(dp);
      compute_dst_inplace<8, 0>(dp, s, dl_a);
      compute_dst_inplace<8, 8>(dp, s, dl_b);
      uint32_t pf[R / 4], df[R / 4];  // P^T and dS^T as bf16 A fragments (64 keys x 128 queries)
#pragma unroll
      for (int i = 0; i < R / 4; ++i) {
        pf[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
        df[i] = pack_bf16(dp[2 * i], dp[2 * i + 1]);
      }
      named_bar_sync(kBarDsFree, 256);  // both warpgroups' dQ MMAs of the last tile are done with dS^T
      store_dst_stmatrix<R>(df, ds_tile, ds_row);
      // dV += P^T dO runs through the barrier and the dQ issue.
      wgmma_fence_regs(dv);
      fence_regs_u32(pf);
      wgmma_fence();
      issue_acc<D, R>(dv, pf, dos);
      wgmma_commit();
      fence_proxy_async_smem();
      named_bar_sync(kBarDs, 256);  // both warpgroups' dS^T stored

      // dQ (this warpgroup's 64 queries x 64 columns over all 128 keys) = dS K; dK += dS^T Q behind it.
      float dq[32];  // dq[nt*4 + 2r + e] = (query 64 wg + warp*16 + g + 8r, column nt*8 + 2t + e)
      begin_dq_dk(dq, dk, df);
      issue_dq<kBc>(dq, ds_tile + uint32_t(wg) * (kBc * 128), k_tile);
      wgmma_commit();
      issue_acc<D, R>(dk, df, qs);
      wgmma_commit();
      wgmma_wait<1>();  // dV and dQ done; dK may still run
      wgmma_fence_regs(dv);
      fence_regs_u32(pf);
      wgmma_fence_regs(dq);

      // Stage dQ * scale (this warpgroup's 64 queries: blocks 2wg, 2wg + 1), wait for dK, hand both on.
      stage_dq_end_tile<D>(dq, dk, df, p.scale, dq_bufs, jq, empty_bar + 8 * st, wg, warp, g, t);
    }
    // Epilogue as bwd_v5_consumer's: K / V are free, dK * scale and dV go through the dQ ring.
    release_to_producer<D>(kv_empty_bar);
    stage_dkv_tile<D, 0>(dk, p.scale, dq_bufs, jq, wg, warp, g, t);
    stage_dkv_tile<D, 0>(dv, 1.f, dq_bufs, jq, wg, warp, g, t);
  }
  dq_buffer_sync_empty(int(jq & 1u), wg);
  dq_buffer_sync_empty(int((jq + 1u) & 1u), wg);
}

}  // namespace wgbwd
}  // namespace cuda
}  // namespace rt
