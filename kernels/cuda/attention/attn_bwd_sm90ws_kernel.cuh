// bwd v5's kernel and its consumer role (kernels/cuda/attention/attn_bwd_sm90ws.cu has the design and the host side):
// one CTA's set-up (shared memory, mbarriers, the register split) and the split into roles. Included by
// attn_bwd_sm90ws.cu and, for the list mode only, attn_bwd_work_list.cu (the kernel stays in each unit's anonymous
// namespace). kList (attn_bwd_sm90ws_list.cuh): the units, their key tiles and query tiles come from a backward work
// list; every other instantiation compiles to the code it had before kList existed (its roles' kList branches are
// `if constexpr`). Keep C++17.
#pragma once
#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_consumer_wide.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_docs.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_dq_warp.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_list.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_producer.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_units.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/pdl.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgbwd;  // the tile body, the layout and the roles (attn_bwd_sm90ws.cu lists them)

// The two consumer warpgroups (0 and 1): per unit, the tile body (attn_bwd_sm90_tile.cuh) on each Q / dO stage,
// dQ staged for the dQ warp, dK and dV kept in registers, then dK * scale and dV through the dQ ring.
// kDocs: pairs of a stage whose class bit is clear take the element mask (attn_bwd_sm90ws_docs.cuh). 64-query tiles;
// the 128-query tiles' consumers are bwd_v5_consumer_wide (attn_bwd_sm90ws_consumer_wide.cuh). kList (with kDocs):
// the unit from the work list (attn_bwd_sm90ws_list.cuh), its keys' base from their positions, and each stage's first
// query row (for the rows past q_end) from the docs warp's stage info.
template <int D, bool kDocs, bool kList = false>
__device__ __forceinline__ void bwd_v5_consumer(const AttnBwdParams& p, const BwdV5Grid& grid, const BwdV5Shared& sh,
                                                const BwdV5DocShared& ds, const BwdWorkListDev& wl, int tid, int wg,
                                                int warp, int lane, int g, int t) {
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
    BwdUnit w;
    if constexpr (kList) w = bwd_list_unit(p, wl, grid, u, span.x);
    else w = bwd_unit<kDocs>(p, grid, u, span);
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
    if constexpr (kDocs) kr = doc_thread_keys<kList>(p, w, krow0, lane);
    mbar_wait(kv_bar, uint32_t(kv_loads) & 1u);
    ++kv_loads;
    int qt = it_begin % n_qt;  // the tile's query tile within its head, stepped (no division per tile)
#pragma unroll 1
    for (int j = 0; j < n_iter; ++j, ++J, ++jq) {
      const uint32_t st = J & 1u;
      const int qi = qt * kBr;  // the tile's first row, from q_first
      qt = qt + 1 == n_qt ? 0 : qt + 1;
      TileMask mask{q_span - qi, k_lim, clamp_rel(diag0 + qi), p.causal};
      const uint32_t qs = q_tiles + st * Smem::kQBytes, dos = do_tiles + st * Smem::kQBytes;
      const uint32_t ds_tile = ds_tiles + st * Smem::kDsBytes;
      const float* lse_t = lse_s + st * kBr;
      const float* delta_t = delta_s + st * kBr;
      mbar_wait(full_bar + 8 * st, (J >> 1) & 1u);  // this stage's Q, dO, lse, delta landed
      if constexpr (kList) {  // the stage's first query row, as the docs warp wrote it before the full barrier
        const int q0 = reinterpret_cast<const volatile int*>(ds.info + st)[1];
        mask.q_lim = int(p.q_end - q0);
      }

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
// kList (with kDocs, 64-row tiles): the list mode (attn_bwd_sm90ws_list.cuh); `wl` is read only there, and the
// grid's n_kt, full_items and units are the list's (T tasks, T x Hkv units, read from its words here).
template <int D, bool kDocs, int R, bool kList = false>
__global__ void __launch_bounds__(kV5Threads, 1)
    attn_bwd_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_do,
                             const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                             const __grid_constant__ CUtensorMap tm_dq, const __grid_constant__ CUtensorMap tm_dk,
                             const __grid_constant__ CUtensorMap tm_dv, const __grid_constant__ CUtensorMap tm_k2,
                             const __grid_constant__ CUtensorMap tm_v2, const __grid_constant__ CUtensorMap tm_dk2,
                             const __grid_constant__ CUtensorMap tm_dv2, const AttnBwdParams p,
                             const BwdV5Grid grid, int* next_unit, const BwdWorkListDev wl) {
#if RT_WGMMA_AVAILABLE
  static_assert(D == 64 || D == 128, "wgmma backward: D must be 64 or 128");
  static_assert(!kList || (kDocs && R == kBr), "bwd v5's list mode runs the document mask on 64-row tiles");
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
  if constexpr (kList) {  // the same roles over the list's units
    BwdV5Grid lg = grid;
    lg.n_kt = bwd_list_tasks(wl);
    lg.full_items = lg.units = lg.n_kt * p.Hkv;
    if (wg == 2) {
      setmaxnreg_dec<kV5ProducerRegs<D>>();
      if (warp == 0)
        bwd_v5_producer<D, true, R, true>(tm_q, tm_do, tm_k, tm_v, tm_k2, tm_v2, p, lg, next_unit, sh, ds, wl, lane);
      else if (warp == 1)
        bwd_v5_dq_warp<D, true, R, true>(tm_dq, tm_dk, tm_dv, tm_dk2, tm_dv2, p, lg, sh, ds, wl, lane);
      else if (warp == 2) bwd_v5_docs_warp<true>(p, lg, sh, ds, wl, lane);
      return;
    }
    setmaxnreg_inc<kV5ConsumerRegs<D>>();
    bwd_v5_consumer<D, true, true>(p, lg, sh, ds, wl, tid, wg, warp, lane, g, t);
    return;
  }
  if (wg == 2) {  // the producer warp and the dQ warp (and the docs warp); the others only give up registers
    setmaxnreg_dec<kV5ProducerRegs<D>>();
    if (warp == 0)
      bwd_v5_producer<D, kDocs, R>(tm_q, tm_do, tm_k, tm_v, tm_k2, tm_v2, p, grid, next_unit, sh, ds, wl, lane);
    else if (warp == 1) bwd_v5_dq_warp<D, kDocs, R>(tm_dq, tm_dk, tm_dv, tm_dk2, tm_dv2, p, grid, sh, ds, wl, lane);
    else if (kDocs && warp == 2) bwd_v5_docs_warp(p, grid, sh, ds, wl, lane);
    return;
  }
  setmaxnreg_inc<kV5ConsumerRegs<D>>();
  if constexpr (R == 128) bwd_v5_consumer_wide<D>(p, grid, sh, tid, wg, warp, lane, g, t);
  else bwd_v5_consumer<D, kDocs>(p, grid, sh, ds, wl, tid, wg, warp, lane, g, t);
#else
  // Built without an sm_90a image: attn_bwd_wgmma_supported() refuses such binaries, so this never runs.
  __trap();
#endif
}

}  // namespace
}  // namespace cuda
}  // namespace rt
