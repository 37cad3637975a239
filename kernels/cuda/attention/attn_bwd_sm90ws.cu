// attn_bwd_block on Hopper, warp-specialized and persistent (bwd v5, sm_90a): the kernel, its consumer role and the
// unit scheduler. The per-tile math is bwd v4's (attn_bwd_sm90_tile.cuh, attn_bwd_sm90.cu); attn_bwd_dispatch.cu
// chooses this kernel and runs v4 for blocks it cannot take (attn_bwd_v5_fits).
#include <algorithm>
#include <climits>
#include <mutex>

#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_consumer_wide.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_docs.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_dq_warp.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_producer.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_units.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/attention/attn_variant.h"
#include "kernels/cuda/pdl.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgbwd;  // kBr (64), kBc (128), the tile body (issue_kq, issue_acc, issue_dq, TileMask,
                        // load_query_stats, compute_pt_from_regs, issue_dv_wait_dp, compute_dst_store_stmatrix,
                        // stage_rows_f32_sw128, zero_dk_dv_rows),
                        // the layout (WgBwdV5Smem, BwdV5Shared, barriers, dq_buffer_*: attn_bwd_sm90ws_layout.cuh) and
                        // the loads and stores roles (bwd_v5_producer: attn_bwd_sm90ws_producer.cuh; bwd_v5_dq_warp:
                        // attn_bwd_sm90ws_dq_warp.cuh)

// Same tiles, math and accumulator layouts as v4 (lse is stored pre-scaled by log2e, and the consumers read the
// query statistics into registers under the MMAs), with three warpgroups (384 threads, 1 CTA per SM), persistent:
//   * the work is a list of units (BwdV5Grid: an item = one key tile of one (batch, K/V head) pair, or a piece of
//     one); at most one CTA per SM; CTA c takes unit c first, then fetches the next from a global counter, so
//     units start in list order as they would on a grid of one CTA per unit, and the next unit's loads overlap
//     this one's epilogue (on a grid of one CTA per unit, each CTA's prologue and epilogue overlapped nothing:
//     bench/NOTES.md "Figures behind the kernel comments");
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
//     barriers dQ empty / full per buffer and consumer warpgroup with the dQ warp); the dQ warp's lane 0 adds
//     each warpgroup's part as soon as it is staged, with 2 cp.reduce.async.bulk.tensor (boxes of 64 rows x 32
//     columns; D = 128: its column half, D = 64: its partial), and hands that part back once they have read it.
//     In deterministic mode it alone waits for the query tile's turn, issues, waits for the reduces to complete
//     and passes the turn; the consumers go on with the other buffer (units
//     are fetched in list order, so a unit waits only on units fetched before it: no deadlock);
//   * the consumers' loop keeps no 64-bit index live (the masks come from 32-bit offsets computed per unit);
//   * order per tile (consumers): wait for the stage, S^T, dP^T | exps | dV | dS^T | barrier | dQ, dK issued |
//     dQ staged while dK runs; the stage is released once dK completed;
//   * epilogue: dK * scale and dV go through the same dQ buffers, 64 columns at a time (2 x D / 64 more tiles
//     of that ring), and the dQ warp adds them to dk_acc / dv_acc (or stores them, overwrite_dkv:
//     attn_bwd_block_fresh) with TMA tensor ops, while the producer loads the next unit's K / V and Q / dO;
//   * the unit list (attn_bwd_sm90ws_units.cuh): causal items in windows of (batch, K/V head) pairs, largest first; a
//     last partial wave of equal items split into pieces that add partial dK / dV (with documents: a list of at
//     most half the SMs, every item split);
//   * documents: a separate instantiation (kDocs) narrows each unit to its span of query tiles and adds a fourth
//     role, the docs warp, which classifies and prepares each stage's mask (attn_bwd_sm90ws_docs.cuh).

// Overwrite mode with a split tail: zeroes the split items' dK / dV rows before their pieces add into them (one
// CTA per item, launched on the same stream before the kernel).
template <int D>
__global__ void zero_split_items_kernel(const AttnBwdParams p, const BwdV5Grid grid) {
  const BwdItem w = bwd_item(grid, p.Hkv, grid.full_items + blockIdx.x);
  zero_dk_dv_rows<D>(p, p.k_begin + w.kt * kBc, w.b, w.hk, int(threadIdx.x), int(blockDim.x));
}

// The two consumer warpgroups (0 and 1): per unit, the tile body (attn_bwd_sm90_tile.cuh) on each Q / dO stage,
// dQ staged for the dQ warp, dK and dV kept in registers, then dK * scale and dV through the dQ ring.
// kDocs: pairs of a stage whose class bit is clear take the element mask (attn_bwd_sm90ws_docs.cuh). 64-query tiles;
// the 128-query tiles' consumers are bwd_v5_consumer_wide (attn_bwd_sm90ws_consumer_wide.cuh).
template <int D, bool kDocs>
__device__ __forceinline__ void bwd_v5_consumer(const AttnBwdParams& p, const BwdV5Grid& grid, const BwdV5Shared& sh,
                                                const BwdV5DocShared& ds, int tid, int wg, int warp, int lane, int g,
                                                int t) {
  using Smem = WgBwdV5Smem<D>;
  const uint32_t k_tile = sh.k_tile, v_tile = sh.v_tile, q_tiles = sh.q_tiles, do_tiles = sh.do_tiles;
  const uint32_t ds_tiles = sh.ds_tiles, dq_bufs = sh.dq_bufs;
  const float* const lse_s = sh.lse_s;
  const float* const delta_s = sh.delta_s;
  const int* const unit_slots = sh.unit_slots;
  const uint32_t full_bar = sh.full_bar, empty_bar = sh.empty_bar, kv_bar = sh.kv_bar, kv_empty_bar = sh.kv_empty_bar;
  const uint32_t unit_full_bar = sh.unit_full_bar, unit_empty_bar = sh.unit_empty_bar;

  const int krow0 = wg * 64 + warp * 16 + g;
  const uint32_t ds_row = ds_row_offset(wg, warp, lane);  // this lane's dS^T stmatrix row
  float dk[D / 2], dv[D / 2];
  float s[32], dp[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = dp[i] = 0.f;
  const uint32_t k_wg = k_tile + uint32_t(wg) * 64 * 128, v_wg = v_tile + uint32_t(wg) * 64 * 128;
  uint32_t J = 0, jq = 0;  // Q / dO stages and dQ-ring tiles so far
  int kv_loads = 0;
#pragma unroll 1
  for (int f = 0;; ++f) {
    int2 span{0, 0};
    const int u = kDocs ? read_unit_span(unit_slots, ds.spans, unit_full_bar, unit_empty_bar, f, lane, span)
                        : read_unit(unit_slots, unit_full_bar, unit_empty_bar, f, lane);
    if (u < 0) break;
    const BwdUnit w = bwd_unit<kDocs>(p, grid, u, span);
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
    uint32_t kr = 0;  // documents: this thread's two keys as 16-bit offsets (loaded before the K / V wait)
    if constexpr (kDocs) kr = doc_thread_keys(p, w, krow0);
    mbar_wait(kv_bar, uint32_t(kv_loads) & 1u);
    ++kv_loads;
    int qt = it_begin % n_qt;  // the tile's query tile within its head, stepped (no division per tile)
#pragma unroll 1
    for (int j = 0; j < n_iter; ++j, ++J, ++jq) {
      const uint32_t st = J & 1u;
      const int qi = qt * kBr;  // the tile's first row, from q_first
      qt = qt + 1 == n_qt ? 0 : qt + 1;
      const TileMask mask{q_span - qi, k_lim, clamp_rel(diag0 + qi), p.causal};
      const uint32_t qs = q_tiles + st * Smem::kQBytes, dos = do_tiles + st * Smem::kQBytes;
      const uint32_t ds_tile = ds_tiles + st * Smem::kDsBytes;
      const float* lse_t = lse_s + st * kBr;
      const float* delta_t = delta_s + st * kBr;
      mbar_wait(full_bar + 8 * st, (J >> 1) & 1u);  // this stage's Q, dO, lse, delta landed

      // lse * log2e of this thread's 16 queries, read before the MMAs are issued: behind them, the loads queue
      // after their operand reads (ncu: a tenth of the consumers' time waited on them there).
      float2 lse2[8];
      load_query_stats(lse2, lse_t, t);
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
      compute_pt_from_regs(s, p.scale2, lse2, mask, krow0, need_mask, t);
      if constexpr (kDocs) doc_mask_stage(s, ds, st, wg, kr, p, krow0, t);  // the docs warp's stage, same barrier
      uint32_t pf[16], df[16];  // P^T and dS^T as bf16 A fragments
      float2 dl[8];             // delta of this thread's 16 queries, loaded under dV and dP^T
      load_query_stats(dl, delta_t, t);
      issue_dv_wait_dp<D>(s, dp, dv, pf, dos);
      compute_dst_store_stmatrix(dp, df, s, dl, ds_tile, ds_row);
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
      begin_dq_dk(dq, dk, df);
      if constexpr (D == 128) issue_dq<kBc>(dq, ds_tile, k_tile + uint32_t(wg) * (kBc * 128));
      else issue_dq<64>(dq, ds_tile + uint32_t(wg) * 64 * 128, k_tile + uint32_t(wg) * 64 * 128);
      wgmma_commit();
      issue_acc<D>(dk, df, qs);
      wgmma_commit();
      wgmma_wait<1>();  // dQ done; dK may still run
      wgmma_fence_regs(dq);

      // Stage dQ * scale: D = 128 columns wg*64.. of the (64, 128) tile; D = 64 partial wg. Column nt*8 + 2t of the
      // warpgroup's 64 is in block 2wg + nt/4, 16-byte chunk (nt%4)*2 + t/2, swizzled with the row (row & 7 = g).
      stage_dq_end_tile<D>(dq, dk, df, p.scale, dq_bufs, jq, empty_bar + 8 * st, wg, warp, g, t);
    }
    // Epilogue: this thread's MMAs are done (its last wgmma_wait<0>), so K / V may take the next unit's tiles
    // while dK * scale and dV go through the dQ ring (kEpilogueTiles tiles of 64 columns) to the dQ warp.
    release_to_producer<D>(kv_empty_bar);
    stage_dkv_tile<D, 0>(dk, p.scale, dq_bufs, jq, wg, warp, g, t);
    if constexpr (D == 128) stage_dkv_tile<D, 1>(dk, p.scale, dq_bufs, jq, wg, warp, g, t);
    stage_dkv_tile<D, 0>(dv, 1.f, dq_bufs, jq, wg, warp, g, t);
    if constexpr (D == 128) stage_dkv_tile<D, 1>(dv, 1.f, dq_bufs, jq, wg, warp, g, t);
  }
  // The dQ warp's last two arrivals on the empty barriers: its reads of both buffers are done.
  dq_buffer_sync_empty(int(jq & 1u), wg);
  dq_buffer_sync_empty(int((jq + 1u) & 1u), wg);
}

// bwd v5: one CTA per SM, three warpgroups running the roles above. kDocs: the document mask (p.docs), a separate
// instantiation with a fourth role, the docs warp (attn_bwd_sm90ws_docs.cuh), so the unmasked kernel has none of it.
template <int D, bool kDocs, int R>
__global__ void __launch_bounds__(kV5Threads, 1)
    attn_bwd_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                             const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                             const __grid_constant__ CUtensorMap tm_dq, const __grid_constant__ CUtensorMap tm_dk,
                             const __grid_constant__ CUtensorMap tm_dv, const __grid_constant__ CUtensorMap tm_k2,
                             const __grid_constant__ CUtensorMap tm_v2, const __grid_constant__ CUtensorMap tm_dk2,
                             const __grid_constant__ CUtensorMap tm_dv2, const AttnBwdParams p,
                             const BwdV5Grid grid, int* next_unit) {
#if RT_WGMMA_AVAILABLE
  static_assert(D == 64 || D == 128, "wgmma backward: D must be 64 or 128");
  using Smem = WgBwdV5Smem<D, R>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t k_tile = base + Smem::kK, v_tile = base + Smem::kV;
  const uint32_t q_tiles = base + Smem::kQ, do_tiles = base + Smem::kDo, ds_tiles = base + Smem::kDs;
  const uint32_t dq_bufs = base + Smem::kDq;  // (2, 4, 64, 32) f32 sw128
  float* lse_s = reinterpret_cast<float*>(smem_raw + (base - raw) + Smem::kStats);  // (2, 64)
  float* delta_s = lse_s + 2 * R;                                                   // (2, R)
  int* unit_slots = reinterpret_cast<int*>(smem_raw + (base - raw) + Smem::kUnits);  // (2)
  const uint32_t full_bar = base + Smem::kBars, empty_bar = full_bar + 16;  // Q / dO stages, 2 x 8 bytes each
  const uint32_t kv_bar = full_bar + 32;        // K and V landed
  const uint32_t kv_empty_bar = full_bar + 40;  // the consumers read K and V no more (kV5ReleaseArrivals)
  const uint32_t unit_full_bar = full_bar + 48, unit_empty_bar = full_bar + 64;  // the unit ring, 2 x 8 each
  unsigned char* const doc_smem = smem_raw + (base - raw);
  const BwdV5DocShared ds{reinterpret_cast<uint32_t*>(doc_smem + Smem::kDocRows),  // (2, 64); kDocs only
                          reinterpret_cast<int4*>(doc_smem + Smem::kDocInfo),       // (2)
                          reinterpret_cast<int2*>(doc_smem + Smem::kDocSpans)};     // (2)
  constexpr uint32_t kStageWriters = kDocs ? 64 : 32;  // the producer's lanes (and the docs warp's)

  grid_dependency_wait();  // launched as a dependent kernel (pdl.cuh): no global access before this
  allow_dependent_launch();
  const int tid = int(threadIdx.x);
  // wg through a shuffle: the compiler then knows it is warp-uniform, so the smem addresses and wgmma descriptors
  // derived from it can live in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  if (tid == 0) {
    mbar_init(full_bar, kStageWriters);
    mbar_init(full_bar + 8, kStageWriters);
    mbar_init(empty_bar, kV5ReleaseArrivals<D>);  // release_to_producer: per warp or per thread
    mbar_init(empty_bar + 8, kV5ReleaseArrivals<D>);
    mbar_init(kv_bar, 1);
    mbar_init(kv_empty_bar, kV5ReleaseArrivals<D>);
    mbar_init(unit_full_bar, 1);
    mbar_init(unit_full_bar + 8, 1);
    mbar_init(unit_empty_bar, kUnitReaders + (kDocs ? 1 : 0));
    mbar_init(unit_empty_bar + 8, kUnitReaders + (kDocs ? 1 : 0));
    mbar_init_fence();
  }
  __syncthreads();  // mbarriers initialized

  const BwdV5Shared sh{k_tile,   v_tile,     q_tiles,  do_tiles,  ds_tiles, dq_bufs,      lse_s,
                       delta_s,  unit_slots, full_bar, empty_bar, kv_bar,   kv_empty_bar, unit_full_bar,
                       unit_empty_bar};
  if (wg == 2) {  // the producer warp and the dQ warp (and the docs warp); the others only give up registers
    setmaxnreg_dec<kV5ProducerRegs<D>>();
    if (warp == 0)
      bwd_v5_producer<D, kDocs, R>(tm_q, tm_do, tm_k, tm_v, tm_k2, tm_v2, p, grid, next_unit, sh, ds, lane);
    else if (warp == 1) bwd_v5_dq_warp<D, kDocs, R>(tm_dq, tm_dk, tm_dv, tm_dk2, tm_dv2, p, grid, sh, ds, lane);
    else if (kDocs && warp == 2) bwd_v5_docs_warp(p, grid, sh, ds, lane);
    return;
  }
  setmaxnreg_inc<kV5ConsumerRegs<D>>();
  if constexpr (R == 128) bwd_v5_consumer_wide<D>(p, grid, sh, tid, wg, warp, lane, g, t);
  else bwd_v5_consumer<D, kDocs>(p, grid, sh, ds, tid, wg, warp, lane, g, t);
#else
  // Built without an sm_90a image: attn_bwd_wgmma_supported() refuses such binaries, so this never runs.
  __trap();
#endif
}

// bwd v5's unit list for n_kt x n_bh items. Causal: windows of pairs whose Q, dO (bf16) and dQ (f32) take at
// most 16 MB (a third of an H100 / H200's 50 MB L2, which is split in two partitions), so that large items start
// before small ones across several pairs and the last items to start are small (one pair per window leaves a tail
// of large items); 16 MB was the best of the budgets measured (bench/NOTES.md "Figures behind the kernel
// comments"). Not
// causal: the remainder of items over the SMs (one CTA per SM) is the last wave; when it is at most half the SMs
// and the dQ adds need no order (not deterministic), each remaining item is split into up to SMs / remainder
// pieces (at most its iterations); with documents, a list of at most half the SMs is split the same way whole.
BwdV5Grid v5_grid(const AttnBwdParams& p, int64_t D, int64_t rows, int64_t n_bh, int64_t n_kt, int n_sm) {
  const int64_t items = n_bh * n_kt;
  BwdV5Grid g{n_kt, n_bh, 1, items, 1, items, 0};
  if (p.causal && p.dq_turn != nullptr) {
    // Deterministic: a unit's dQ adds wait for every earlier key tile of its pair, and key tile 0 reaches query
    // tile q only after q of its own tiles, so the units running at once should come from as many pairs as
    // possible: one window of every pair (a window of one pair serializes them behind key tile 0: bench/NOTES.md).
    g.window = n_bh;
  } else if (p.causal || p.docs.on) {  // documents: items as unequal as causal ones (one document is causal)
    const int64_t pair_bytes = (p.q_end - p.q_begin) * p.group * D * 8;
    g.window = std::max<int64_t>(1, std::min<int64_t>(n_bh, (int64_t(16) << 20) / std::max<int64_t>(pair_bytes, 1)));
    // Documents, a list of at most half the SMs (the gathered call of a rank that received a few rows: 16 items
    // on 132 SMs, each sweeping its documents' query span, took 1.75 ms at cp 4, 128K): every item in up to
    // SMs / items pieces of its iterations (a piece past an item's span has none and does nothing).
    const int64_t item_iters = p.group * ((p.q_end - p.q_begin + rows - 1) / rows);  // an upper bound
    const int64_t pieces = std::min<int64_t>(n_sm / std::max<int64_t>(items, 1), item_iters);
    if (p.docs.on && p.dq_turn == nullptr && 2 * items <= n_sm && pieces >= 2 &&
        attn_variant_override().bwd_doc_pieces) {
      g.full_items = 0;
      g.pieces = int(pieces);
      g.units = items * pieces;
    }
  } else {
    const int64_t rem = items % n_sm;
    const int64_t item_iters = p.group * ((p.q_end - p.q_begin + rows - 1) / rows);
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

// The counter from which bwd v5's CTAs fetch their units after the first, per device: zeroed once, and set back
// to 0 by each launch's last fetch (so, like the deterministic turn counters, one launch at a time per device).
int* bwd_unit_counter(int device, cudaStream_t stream) {
  static std::mutex mutex;
  static int* counters[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  int*& c = counters[device_slot(device)];
  if (c == nullptr) {  // zeroed once; each launch leaves it at 0 (bwd_v5_producer)
    CUDA_CHECK(cudaMalloc(&c, sizeof(int)));
    CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(int), stream));
  }
  return c;
}

template <int D, bool kDocs, int R>
void launch(const AttnBwdParams& p, int64_t B, int device, cudaStream_t stream) {
  constexpr size_t smem = kDocs ? WgBwdV5Smem<D, R>::kBytesDocs : WgBwdV5Smem<D, R>::kBytes;
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_ws_kernel<D, kDocs, R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    configured[device_slot(device)] = true;
  }
  const int64_t tiles = (p.k_end - p.k_begin + kBc - 1) / kBc;
  RT_CHECK(tiles <= INT_MAX, "attn_bwd_block: too many key rows (" << p.k_end - p.k_begin << ")");
  RT_CHECK(p.q_end <= INT_MAX && p.k_end <= INT_MAX && p.H <= INT_MAX,
           "attn_bwd_block (v5): TMA coordinates are 32-bit; Nq = " << p.Nq << ", Nk = " << p.Nk << ", H = " << p.H
               << "; split the call into query / key sub-ranges (AttnMask q_begin / k_begin) under 2^31 rows");
  const CUtensorMap tq = make_rows_heads_tma_map(p.q, B, p.Nq, p.q_end, p.H, D, R);
  const CUtensorMap tdo = make_rows_heads_tma_map(p.dout, B, p.Nq, p.q_end, p.H, D, R);
  // Two key sources (p.k2_row > 0, documents and overwrite only): the first maps end at its own rows, the second's
  // hold the rest.
  const bool two = kDocs && p.k2_row > 0;
  const int64_t k1_end = two ? p.Nk : p.k_end, n2 = p.k_end - p.k2_row;
  RT_CHECK(!two || (p.k2_row % kBc == 0 && p.k2_row >= p.Nk && p.Nk >= kBc && n2 >= kBc && p.overwrite_dkv &&
                    p.k2 != nullptr && p.v2 != nullptr && p.dk2 != nullptr && p.dv2 != nullptr),
           "attn_bwd_ws: two key sources need k2_row a multiple of " << kBc << " at or past Nk = " << p.Nk
               << ", both sources >= " << kBc << " rows and the overwrite form (k2_row = " << p.k2_row << ")");
  const CUtensorMap tk = make_rows_heads_tma_map(p.k, B, p.Nk, k1_end, p.Hkv, D, kBc);
  const CUtensorMap tv = make_rows_heads_tma_map(p.v, B, p.Nk, k1_end, p.Hkv, D, kBc);
  const CUtensorMap tdq = make_rows_heads_tma_map(p.dq, B, p.Nq, p.q_end, p.H, D, kBr, 4);
  const CUtensorMap tdk = make_rows_heads_tma_map(p.dk, B, p.Nk, k1_end, p.Hkv, D, kBr, 4);
  const CUtensorMap tdv = make_rows_heads_tma_map(p.dv, B, p.Nk, k1_end, p.Hkv, D, kBr, 4);
  const CUtensorMap tk2 = two ? make_rows_heads_tma_map(p.k2, B, n2, n2, p.Hkv, D, kBc) : tk;
  const CUtensorMap tv2 = two ? make_rows_heads_tma_map(p.v2, B, n2, n2, p.Hkv, D, kBc) : tv;
  const CUtensorMap tdk2 = two ? make_rows_heads_tma_map(p.dk2, B, n2, n2, p.Hkv, D, kBr, 4) : tdk;
  const CUtensorMap tdv2 = two ? make_rows_heads_tma_map(p.dv2, B, n2, n2, p.Hkv, D, kBr, 4) : tdv;
  const int n_sm = device_props().multiProcessorCount;  // `device` is current (stream_for in the dispatcher)
  const BwdV5Grid g = v5_grid(p, D, R, p.Hkv * B, tiles, n_sm);
  RT_CHECK(g.units + g.ctas <= INT_MAX, "attn_bwd_block (v5): " << g.units << " work units (key tiles x batch x "
                                            "K/V heads) do not fit 32 bits; split the batch or the key range");
  if (g.pieces > 1 && p.overwrite_dkv) {
    zero_split_items_kernel<D><<<unsigned((g.units - g.full_items) / g.pieces), 256, 0, stream>>>(p, g);
    CUDA_CHECK_LAUNCH();
  }
  if constexpr (kDocs) attn_doc_k128_spans(p.docs, B, stream);  // each unit's query span (attn_bwd_sm90ws_docs.cuh)
  int* next_unit = bwd_unit_counter(device, stream);
  launch_dependent_kernel(attn_bwd_ws_kernel<D, kDocs, R>, dim3(unsigned(g.ctas)), dim3(kV5Threads), smem, stream,
                          tq, tdo, tk, tv, tdq, tdk, tdv, tk2, tv2, tdk2, tdv2, p, g, next_unit);
}

}  // namespace

void launch_attn_bwd_ws(const AttnBwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream) {
  RT_CHECK(D == 128 || D == 64,
           "attn_bwd_block (ws): head dim " << D << " is not 64 or 128; use the mma.sync kernel");
  RT_CHECK(attn_bwd_v5_fits(p.q_end, p.k_end), "attn_bwd_block (ws): q_end = " << p.q_end << ", k_end = " << p.k_end
                                                   << " are under its TMA boxes (64, 128 rows); run bwd v4");
  RT_CHECK(p.k2_row == 0 || p.docs.on, "attn_bwd_block (ws): two key sources only with the document mask");
  RT_CHECK(!(p.docs.on && p.dq_turn != nullptr),
           "attn_bwd_block (ws): no document mask in deterministic mode (its turn counters need every key tile on "
           "every query tile); run bwd v4");
  // D = 64 without documents or turn counters: 128-query tiles where a 128-row TMA box fits (kV5WideRows).
  const bool wide = D == 64 && !p.docs.on && p.dq_turn == nullptr && p.q_end >= kV5WideRows<64>;
  if (p.docs.on) D == 64 ? launch<64, true, kBr>(p, B, device, stream) : launch<128, true, kBr>(p, B, device, stream);
  else if (D == 128) launch<128, false, kBr>(p, B, device, stream);
  else if (wide) launch<64, false, kV5WideRows<64>>(p, B, device, stream);
  else launch<64, false, kBr>(p, B, device, stream);
}

}  // namespace cuda
}  // namespace rt
