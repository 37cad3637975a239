// bwd v5's producer warp (kernels/cuda/attention/attn_bwd_sm90ws.cu, warpgroup 2, warp 0): the loads stage of the
// pipeline (the units, Q / dO / lse / delta per iteration, K / V per unit). Included by attn_bwd_sm90ws.cu only; keep
// C++17.
#pragma once
#include <cmath>

#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_docs.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_units.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace wgbwd {

// The producer warp (warpgroup 2, warp 0): fetches the units (the first is blockIdx.x, then a global counter
// hands them out in order) and publishes each in the unit ring; per unit with work: Q, dO (TMA, lane 0), lse, delta (all lanes) of each
// iteration into stage J & 1 of a ring that runs on across units, and K / V (TMA, lane 0, their own
// barrier) once the first stage is in flight and the consumers are done with the previous unit's K / V.
// kDocs: the unit's span (attn_bwd_sm90ws_docs.cuh) is loaded here and published with the unit. R: query rows per
// tile (kV5WideRows). kList (with kDocs): the unit from the work list, its stage count published as span.x, its
// iterations from the task's segments (attn_bwd_sm90ws_list.cuh).
template <int D, bool kDocs, int R, bool kList = false>
__device__ __forceinline__ void bwd_v5_producer(const CUtensorMap& tm_q, const CUtensorMap& tm_do,
                                                const CUtensorMap& tm_k, const CUtensorMap& tm_v,
                                                const CUtensorMap& tm_k2, const CUtensorMap& tm_v2,
                                                const AttnBwdParams& p, const BwdV5Grid& grid, int* next_unit,
                                                const BwdV5Shared& sh, const BwdV5DocShared& ds,
                                                const BwdWorkListDev& wl, int lane) {
  using Smem = WgBwdV5Smem<D, R>;
  const uint32_t k_tile = sh.k_tile, v_tile = sh.v_tile, q_tiles = sh.q_tiles, do_tiles = sh.do_tiles;
  float* const lse_s = sh.lse_s;
  float* const delta_s = sh.delta_s;
  int* const unit_slots = sh.unit_slots;
  const uint32_t full_bar = sh.full_bar, empty_bar = sh.empty_bar, kv_bar = sh.kv_bar, kv_empty_bar = sh.kv_empty_bar;
  const uint32_t unit_full_bar = sh.unit_full_bar, unit_empty_bar = sh.unit_empty_bar;
  if (lane == 0) {
    tma_prefetch_desc(&tm_q);
    tma_prefetch_desc(&tm_do);
    tma_prefetch_desc(&tm_k);
    tma_prefetch_desc(&tm_v);
    if (kDocs && p.k2_row > 0) {
      tma_prefetch_desc(&tm_k2);
      tma_prefetch_desc(&tm_v2);
    }
  }
  uint32_t J = 0;  // stages issued so far
  int kv_loads = 0;
  int u = int(blockIdx.x);
#pragma unroll 1
  for (int f = 0;; ++f) {
    int2 span{0, 0};
    if constexpr (kList) span.x = u < grid.units ? bwd_list_stages(p, wl, grid, u) : 0;
    else if constexpr (kDocs) span = u < grid.units ? doc_unit_span(p, grid, u) : span;
    if (lane == 0) {
      if (f >= 2) mbar_wait(unit_empty_bar + 8 * (f & 1), uint32_t((f >> 1) - 1) & 1u);
      unit_slots[f & 1] = u < grid.units ? u : -1;
      if constexpr (kDocs) ds.spans[f & 1] = span;
      mbar_arrive(unit_full_bar + 8 * (f & 1));
    }
    if (u >= grid.units) break;
    BwdUnit w;
    if constexpr (kList) w = bwd_list_unit(p, wl, grid, u, span.x);
    else w = bwd_unit<kDocs, R>(p, grid, u, span);
    BwdListCursor cur;
    if constexpr (kList)
      if (w.n_iter > 0) cur.begin(p, wl, grid, w);
#pragma unroll 1
    for (int j = 0; j < w.n_iter; ++j, ++J) {
      const uint32_t st = J & 1u;
      if (J >= 2) mbar_wait(empty_bar + 8 * st, ((J >> 1) - 1u) & 1u);
      int h, q0;
      if constexpr (kList) {
        h = w.hk * int(p.group) + cur.head;
        q0 = cur.q0;
        cur.next();
      } else {
        const int it = w.it_begin + j;
        h = w.hk * int(p.group) + it / w.n_qt;
        q0 = w.q_first + (it % w.n_qt) * R;
      }
      const int64_t stats_row = (int64_t(w.b) * p.H + h) * p.Nq + q0;
      const float* lse_src = p.lse + stats_row;
      const float* delta_src = p.delta + stats_row;
#pragma unroll
      for (int r = lane; r < R; r += 32) {  // rows past q_end: 0 (they are masked)
        const bool ok = q0 + r < p.q_end;
        const float lse = ok ? lse_src[r] : 0.f;
        lse_s[st * R + r] = lse == -INFINITY ? INFINITY : lse * kLog2e;  // no visible key: P = 0
        delta_s[st * R + r] = ok ? delta_src[r] : 0.f;
      }
      if (lane == 0) {  // the stage's barrier completes with 32 arrivals and the bytes of both tiles
        const uint32_t bar = full_bar + 8 * st;
        mbar_arrive_expect_tx(bar, 2 * Smem::kQBytes);
#pragma unroll
        for (int c = 0; c < D / 64; ++c) {
          tma_load_4d(q_tiles + st * Smem::kQBytes + uint32_t(c) * (R * 128), &tm_q, bar, c * 64, h, q0, int(w.b));
          tma_load_4d(do_tiles + st * Smem::kQBytes + uint32_t(c) * (R * 128), &tm_do, bar, c * 64, h, q0,
                      int(w.b));
        }
        if (j == 0) {  // K and V (one barrier), once the previous unit's are read no more
          if (kv_loads > 0) mbar_wait(kv_empty_bar, uint32_t(kv_loads - 1) & 1u);
          mbar_arrive_expect_tx(kv_bar, 2 * Smem::kKVBytes);
          // Two key sources (documents, attn_bwd_fresh_two_kv): a tile at or past k2_row is the second's.
          const bool second = kDocs && p.k2_row > 0 && w.k0 >= p.k2_row;
          const CUtensorMap* mk = second ? &tm_k2 : &tm_k;
          const CUtensorMap* mv = second ? &tm_v2 : &tm_v;
          const int k_row = int(second ? w.k0 - p.k2_row : w.k0);
#pragma unroll
          for (int c = 0; c < D / 64; ++c) {
            tma_load_4d(k_tile + uint32_t(c) * (kBc * 128), mk, kv_bar, c * 64, int(w.hk), k_row, int(w.b));
            tma_load_4d(v_tile + uint32_t(c) * (kBc * 128), mv, kv_bar, c * 64, int(w.hk), k_row, int(w.b));
          }
        }
      } else {
        mbar_arrive(full_bar + 8 * st);
      }
    }
    if (w.n_iter > 0) ++kv_loads;
    int next = 0;
    if (lane == 0) {
      // Each launch makes exactly grid.units fetches (one per unit past the first ctas, and one per CTA that
      // finds the list empty), so the one that reads units - 1 is the last: it sets the counter back to 0 for
      // the next launch (no memset before each launch).
      const int taken = atomicAdd(next_unit, 1);
      if (taken == int(grid.units) - 1) atomicExch(next_unit, 0);
      next = int(grid.ctas) + taken;
    }
    u = __shfl_sync(0xffffffffu, next, 0);
  }
}

}  // namespace wgbwd
}  // namespace cuda
}  // namespace rt
