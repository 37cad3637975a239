// bwd v5's dQ warp (kernels/cuda/attention/attn_bwd_sm90ws.cu, warpgroup 2, warp 1): the stores stage of the pipeline
// (dQ reduces per iteration, dK / dV per unit). Included by attn_bwd_sm90ws.cu only; keep C++17.
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

// The dQ warp (warpgroup 2, warp 1): per unit, the staged dQ tiles into dq_acc with TMA tensor reduces (lane 0),
// then the unit's epilogue tiles into dk / dv (TMA stores when overwriting, else reduces). Each buffer's empty barrier
// (one per consumer warpgroup, kDqParts) gets 1 arrival up front and one after each tile; the consumers sync
// once per tile and twice at the end. kList: the unit and its iterations from the work list (attn_bwd_sm90ws_list.cuh).
template <int D, bool kDocs, int R, bool kList = false>
__device__ __forceinline__ void bwd_v5_dq_warp(const CUtensorMap& tm_dq, const CUtensorMap& tm_dk,
                                               const CUtensorMap& tm_dv, const CUtensorMap& tm_dk2,
                                               const CUtensorMap& tm_dv2, const AttnBwdParams& p,
                                               const BwdV5Grid& grid, const BwdV5Shared& sh,
                                               const BwdV5DocShared& ds, const BwdWorkListDev& wl, int lane) {
  using Smem = WgBwdV5Smem<D, R>;
  constexpr int kEpilogueTiles = 2 * D / 64;  // dK, then dV, 64 columns each
  const uint32_t dq_bufs = sh.dq_bufs;
  const int* const unit_slots = sh.unit_slots;
  const uint32_t unit_full_bar = sh.unit_full_bar, unit_empty_bar = sh.unit_empty_bar;
  if (lane == 0) {
    tma_prefetch_desc(&tm_dq);
    tma_prefetch_desc(&tm_dk);
    tma_prefetch_desc(&tm_dv);
    if (kDocs && p.k2_row > 0) {
      tma_prefetch_desc(&tm_dk2);
      tma_prefetch_desc(&tm_dv2);
    }
  }
  for (int part = 0; part < kDqParts; ++part) {  // both buffers start empty
    dq_buffer_arrive_empty(0, part);
    dq_buffer_arrive_empty(1, part);
  }
  uint32_t jq = 0;  // dQ-ring tiles so far
#pragma unroll 1
  for (int f = 0;; ++f) {
    int2 span{0, 0};
    const int u = kDocs ? read_unit_span(unit_slots, ds.spans, unit_full_bar, unit_empty_bar, f, lane, span)
                        : read_unit(unit_slots, unit_full_bar, unit_empty_bar, f, lane);
    if (u < 0) break;
    BwdUnit w;
    if constexpr (kList) w = bwd_list_unit(p, wl, grid, u, span.x);
    else w = bwd_unit<kDocs, R>(p, grid, u, span);
    if (w.n_iter == 0) continue;
    const int mine = w.kt;  // deterministic mode never splits: the unit is the whole key tile
    BwdListCursor cur;
    if constexpr (kList) cur.begin(p, wl, grid, w);
#pragma unroll 1
    for (int j = 0; j < w.n_iter; ++j, ++jq) {
      const int sb = int(jq & 1u);
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
      // The tile's coordinates (as the producer computes them) and, in deterministic mode, its turn counter.
      const int64_t q_tiles_per_head = (p.q_end - p.q_begin + kBr - 1) / kBr;
      int* turn = p.dq_turn == nullptr
                      ? nullptr
                      : p.dq_turn + (int64_t(w.b) * p.H + h) * q_tiles_per_head + (q0 - p.q_begin) / kBr;
      const uint32_t buf = dq_bufs + uint32_t(sb) * Smem::kDqBufBytes;
      // Part w = warpgroup w's blocks 2w, 2w + 1: D = 128 columns [64w, 64w + 64); D = 64 its partial (128-query
      // tiles: queries [64w, 64w + 64), no turn counters). Part 0 before part 1 on every run.
#pragma unroll 1
      for (int part = 0; part < kDqParts; ++part) {
        dq_buffer_sync_full(sb, part);
        if (lane == 0) {
          if (turn != nullptr && part == 0) {
            int seen;
            do {
              asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(turn) : "memory");
            } while (seen != mine);
            fence_proxy_async_global();
          }
          constexpr int kBlocks = 4 / kDqParts;
#pragma unroll
          for (int i = 0; i < kBlocks; ++i) {
            const int blk = part * kBlocks + i;
            tma_reduce_add_4d(&tm_dq, buf + uint32_t(blk) * Smem::kDqBlockBytes, (blk * 32) % D, h,
                              q0 + (R == 128 ? 64 * part : 0), int(w.b));
          }
          bulk_commit();
          if (turn != nullptr) {
            bulk_wait<0>();
            if (part + 1 == kDqParts) {
              fence_proxy_async_global();
              __threadfence();
              asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(turn), "r"(mine + 1) : "memory");
            }
          } else {
            bulk_wait_read<0>();
          }
        }
        __syncwarp();
        dq_buffer_arrive_empty(sb, part);
      }
    }
    // Pieces add into rows zeroed before the kernel; rows past k_end are skipped by the tensor maps.
    const bool store_dkv = p.overwrite_dkv && !w.piece;
    // Two key sources: the second's tiles go to dk2 / dv2, at their rows there.
    const bool second = kDocs && p.k2_row > 0 && w.k0 >= p.k2_row;
    const int k_row = int(second ? w.k0 - p.k2_row : w.k0);
#pragma unroll 1
    for (int e = 0; e < kEpilogueTiles; ++e, ++jq) {
      const int sb = int(jq & 1u);
      const CUtensorMap* tm = e < D / 64 ? (second ? &tm_dk2 : &tm_dk) : (second ? &tm_dv2 : &tm_dv);
      const int col0 = (e % (D / 64)) * 64;
      const uint32_t buf = dq_bufs + uint32_t(sb) * Smem::kDqBufBytes;
#pragma unroll 1
      for (int part = 0; part < kDqParts; ++part) {
        dq_buffer_sync_full(sb, part);
        if (lane == 0) {
          constexpr int kBlocks = 4 / kDqParts;
#pragma unroll
          for (int i = 0; i < kBlocks; ++i) {  // block 2w + c: keys 64w.., columns col0 + 32c..
            const int blk = part * kBlocks + i;
            const uint32_t src = buf + uint32_t(blk) * Smem::kDqBlockBytes;
            const int col = col0 + (blk % 2) * 32, row = k_row + (blk / 2) * 64;
            if (store_dkv) tma_store_4d(tm, src, col, int(w.hk), row, int(w.b));
            else tma_reduce_add_4d(tm, src, col, int(w.hk), row, int(w.b));
          }
          bulk_commit();
          bulk_wait_read<0>();
        }
        __syncwarp();
        dq_buffer_arrive_empty(sb, part);
      }
    }
  }
  if (lane == 0) bulk_wait<0>();  // every write performed before the CTA ends
}

}  // namespace wgbwd
}  // namespace cuda
}  // namespace rt
