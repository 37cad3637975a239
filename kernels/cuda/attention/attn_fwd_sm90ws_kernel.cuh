// fwd v5's kernel (kernels/cuda/attention/attn_fwd_sm90ws.cu has its design and the host side): one CTA's set-up and
// the split into roles. It carves shared memory, takes its query tile (heaviest first; with documents in the order of
// attn_doc_q128_order) and the keys that tile sees, leaves early when it owns only rows no key reaches
// (attn_fwd_sm90ws_grid.cuh), initializes the mbarriers, then runs warpgroup 0 as the producer
// (attn_fwd_sm90ws_producer.inc) and warpgroups 1 .. kCons as the consumers (attn_fwd_sm90ws_consumer.inc). The two
// roles' code is included into this function, not called: as functions they compiled to other SASS
// (bench/NOTES.md "fwd v5 by role"). Included by attn_fwd_sm90ws.cu and, for the list mode only, attn_fwd_work_list.cu
// (the kernel stays in each unit's anonymous namespace); keep C++17.
// kList (with kDocs; attn_fwd_work_list.cuh): the CTA's (task, head), its query tile and its key tiles come from the
// work list instead of the grid, the per-call summaries and spans; the roles run over the tiles (`live`) as over a
// document CTA's, except that the tile tests take each consumer warp's row bounds and each key tile's range from the
// list (list_doc_rows, list_tile_keys), that thread 0 initializes the mbarriers and issues the Q load before the
// segments' expansion (whose block barriers then run under it), and that the consumers end in work_list_epilogue (a
// split task's part stores its state and the last part merges; attn_fwd_work_list_split.cuh). Every other instantiation compiles to the code it had
// before kList existed.
// kFlags (with kList; attn_fwd_work_list_ready.cuh): the ready flags' wait before a unit's first gathered tile, its
// watchdog, and the NaN rows of a unit that gave up; the kList instantiation without it compiles to the code it had
// before kFlags existed.
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attn_doc_mask.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_docs_warp.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_grid.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list_ready.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list_split.cuh"
#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/pdl.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgRowsPerCta (128), kWgKeysPerTile (128); in the role fragments issue_qk, issue_pv,
                        // softmax_tile, rescale_o, load_state_rows, store_state_rows, fresh_state_rows, store_final_rows

// The list mode's unit start, thread 0 (kList; also the persistent form's, attn_fwd_work_list_persistent.cuh): the
// mbarriers (and with kFlags the ready barrier), then Q on its way before the segments' expansion, whose block
// barriers publish the initialization to the other threads (a unit always has a tile: work_list_tiles traps on an
// empty segment, so the CTA never leaves with the load in flight). K_0 stays the producer's: issued here too, it cost
// the D = 128 kernel 76 more bytes of spill (44 -> 120; ptxas -v).
template <int D, int kCons, int kRows, int kStages, bool kFlags>
__device__ __forceinline__ void work_list_unit_start(const WsBars<kStages>& bars, const CUtensorMap* tm_q,
                                                     uint32_t q_tile, const WorkListUnit& unit) {
  mbar_init(bars.q_full(), 1);
  for (int s = 0; s < kStages; ++s) {
    mbar_init(bars.k_full(s), 1 + 32);  // + the key-position warp's lanes
    mbar_init(bars.v_full(s), 1);
    mbar_init(bars.k_empty(s), 128 * kCons);
    mbar_init(bars.v_empty(s), 128 * kCons);
  }
  if constexpr (kFlags) work_list_ready_init();
  mbar_init_fence();
  tma_prefetch_desc(tm_q);
  mbar_arrive_expect_tx(bars.q_full(), WsSmem<D, kRows, kStages>::kQBytes);
  tma_tile<D, kRows>(q_tile, tm_q, bars.q_full(), int(unit.h), unit.tile * kRows, int(unit.b));
}

// kDocs: the document mask (p.docs) is on; a separate instantiation, so the unmasked kernel has none of its code.
// kList: the list mode (above; needs kDocs); `wl` is read only there. kFlags: its ready flags (needs kList).
template <int D, bool kDocs, int kCons, bool kList = false, bool kFlags = false>
__global__ void __launch_bounds__(kWsThreads<kCons>, kWsCtasPerSm<kCons>)
    attn_fwd_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_k2,
                       const __grid_constant__ CUtensorMap tm_v2, const AttnFwdParams p, int num_q_tiles,
                       int head_window, const WsWorkList wl) {
#if RT_WGMMA_AVAILABLE
  static_assert(!kList || kDocs, "fwd v5's list mode runs the document mask");
  static_assert(!kFlags || kList, "the ready flags are the list mode's");
  static_assert(!kList || 16 * 4 * kCons == kAttnWorkRowGroupRows * kAttnWorkRowGroups,
                "the list's row bounds are per 16-row warp of a 128-row tile (kernels/attn_work_list.h)");
  constexpr int kRows = 64 * kCons;  // query rows per CTA
  constexpr int kStages = kWsStages<D, kCons>;
  using Smem = WsSmem<D, kRows, kStages>;
  constexpr int kBc = kWgKeysPerTile;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const WsBars<kStages> bars{base};
  // Documents: (kStages, 128) u32, the low word of each key's position of the stage's tile (key_positions_warp).
  uint32_t* key_pos = reinterpret_cast<uint32_t*>(smem_raw + (base - smem_addr(smem_raw)) + Smem::kBarBytes);
  const uint32_t q_tile = base + Smem::kBarBytes + Smem::kKeyPosBytes;  // (kRows, D) bf16 sw128
  const uint32_t k_tiles = q_tile + Smem::kQBytes;         // (kStages, 128, D) bf16 sw128
  const uint32_t v_tiles = k_tiles + kStages * Smem::kKVBytes;  // (kStages, 128, D) bf16 sw128

  int64_t h = blockIdx.y, b = blockIdx.z;  // documents: remapped below with the query tile
  grid_dependency_wait();  // launched as a dependent kernel (pdl.cuh): no global access before this
  allow_dependent_launch();
  // List mode: this CTA's (task, head), or none (a fill CTA, done inside, or a unit past the list's tasks).
  constexpr bool kPersistent = false;  // the role fragments' (attn_fwd_work_list_persistent.cuh has the other form)
  const int64_t unit_d = blockIdx.x;   // the list mode's unit
  WorkListUnit unit{};
  if constexpr (kList) {
    if (!work_list_unit<D>(p, wl, num_q_tiles, head_window, unit_d, unit)) return;
    h = unit.h;
    b = unit.b;
    if (threadIdx.x == 0) work_list_unit_start<D, kCons, kRows, kStages, kFlags>(bars, &tm_q, q_tile, unit);
  }
  // The fresh and finalized forms' tiles of the rows outside [q_begin, q_end) come first: short CTAs that then
  // run side by side on every SM (after the query tiles, they queued on the few SMs a one-wave step leaves free).
  const int outside = int(gridDim.x) - num_q_tiles;
  if (!kList && int(blockIdx.x) < outside) {
    int64_t r0, r1;
    outside_tile_rows(p, int(blockIdx.x), r0, r1);
    no_key_rows<D>(p, b, h, r0, r1);
    return;
  }
  int tile = num_q_tiles - 1 - (int(blockIdx.x) - outside);  // heaviest (causal) tiles first
  int64_t k_lo = p.k_begin;  // keys this CTA visits: [k_lo, k_hi)
  int64_t k_hi = p.k_end;
  if constexpr (kList) tile = unit.tile;  // keys: the list's tiles from k_begin (below)
  if constexpr (kDocs && !kList) {
    // Documents: the query tiles in the order of bwd v5's unit list (attn_bwd_sm90ws_units.cuh). The CTAs' dispatch
    // rank d runs over windows of head_window (batch, head) pairs, heads fastest, whose K/V share an L2 budget (the
    // launcher's fwd_doc_head_window); within a window rank by rank of attn_doc_q128_order (most key tiles first)
    // with the pairs fastest, so every pair's longest tiles start before any pair's short ones and the last CTAs to
    // start are short. head_window 1: each head's tiles in order, the heads one after another (a slot-major order
    // over all heads, K/V past L2, measured 15-20% slower on whole calls). Which CTA runs a tile changes, never
    // what it computes. The tile's key span was found once per call (not by a scan of every key summary per CTA).
    const int64_t n_bh = int64_t(gridDim.y) * gridDim.z, window = head_window;
    const int64_t d = (int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * num_q_tiles + (int(blockIdx.x) - outside);
    const int64_t w = d / (window * num_q_tiles), rem = d % (window * num_q_tiles);
    const int64_t width = min(window, n_bh - w * window);  // the last window may hold fewer pairs
    const int64_t pair = w * window + rem % width;
    h = pair % gridDim.y;
    b = pair / gridDim.y;
    tile = p.docs.q128_order[b * num_q_tiles + int(rem / width)];
    const int2 span = p.docs.q128_span[b * num_q_tiles + tile];
    if (span.x > span.y) {
      k_hi = k_lo;
    } else {
      // Two key sources: the CTA's 128-key tiles start at a multiple of 128 (k2_row is one), so that no tile holds
      // rows of both sources; the 64 keys this may add before the span are invisible to the tile and masked.
      const int first = p.k2_row > 0 ? span.x & ~1 : span.x;
      k_lo = p.k_begin + int64_t(first) * kDocTileRows;
      k_hi = min(p.k_end, p.k_begin + int64_t(span.y + 1) * kDocTileRows);
    }
  }
  const int64_t q0 = p.q_begin + int64_t(tile) * kRows;
  const int64_t q_last = min(q0 + kRows, p.q_end) - 1;
  if (p.causal) k_hi = min(k_hi, q_last + p.diag + 1);
  int n_tiles = k_hi > k_lo ? int((k_hi - k_lo + kBc - 1) / kBc) : 0;
  const unsigned short* live = nullptr;  // documents: the span's tiles some row may see (doc_live_key_tiles)
  if constexpr (kList) {  // the unit's segments, expanded: list tiles from k_lo = k_begin (0)
    // Through a shuffle, so that the compiler knows the count is warp-uniform (as wg below).
    n_tiles = __shfl_sync(0xffffffffu, work_list_tiles<kWsThreads<kCons>>(p, wl, unit, work_list_scratch()), 0);
    live = work_list_scratch().tiles;
  }
  if constexpr (kDocs && !kList) {
    // A tile of several runs of rows (documents) lists the span's tiles they may see; one run needs no list, but
    // with two key sources its span may reach from its own keys to the second source's past every key between.
    __shared__ DocLiveScratch live_scratch;
    if (n_tiles > 1 && n_tiles <= kDocLiveMax && (p.docs.q128_nruns[b * num_q_tiles + tile] > 1 || p.k2_row > 0)) {
      n_tiles = doc_live_key_tiles<kWsThreads<kCons>>(p.docs, b, tile, p.k_begin, k_lo, n_tiles, live_scratch);
      live = live_scratch.list;
    }
  }
  if (n_tiles == 0) {  // no visible key (the whole CTA leaves before any barrier)
    no_key_rows<D>(p, b, h, q0, q_last + 1);
    return;
  }
  // The key row of the CTA's j-th tile: the span's j-th, or with documents its j-th live one.
  auto key_tile = [&](int j) { return k_lo + int64_t(live != nullptr ? live[j] : j) * kBc; };

  if constexpr (!kList) {  // (the list mode initialized them before its expansion)
    if (threadIdx.x == 0) {
      mbar_init(bars.q_full(), 1);
      for (int s = 0; s < kStages; ++s) {
        mbar_init(bars.k_full(s), kDocs ? 1 + 32 : 1);  // documents: + the key-position warp's lanes
        mbar_init(bars.v_full(s), 1);
        mbar_init(bars.k_empty(s), 128 * kCons);
        mbar_init(bars.v_empty(s), 128 * kCons);
      }
      mbar_init_fence();
    }
    __syncthreads();
  }

  // Through a shuffle, so the compiler knows wg is warp-uniform (addresses derived from it stay in uniform
  // registers).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 0) {
    // ---- producer ----
#include "kernels/cuda/attention/attn_fwd_sm90ws_producer.inc"
    return;
  }

  // ---- consumers ----
#include "kernels/cuda/attention/attn_fwd_sm90ws_consumer.inc"
#else
  // Built without an sm_90a image: attn_fwd_ws_supported() refuses such binaries, so this never runs.
  __trap();
#endif
}

}  // namespace
}  // namespace cuda
}  // namespace rt
