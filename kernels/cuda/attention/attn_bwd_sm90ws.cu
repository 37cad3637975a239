// attn_bwd_block on Hopper, warp-specialized and persistent (bwd v5, sm_90a): the design, the unit scheduler and the
// launch (the kernel and its consumer role: attn_bwd_sm90ws_kernel.cuh). The per-tile math is bwd v4's
// (attn_bwd_sm90_tile.cuh, attn_bwd_sm90.cu); attn_bwd_dispatch.cu chooses this kernel and runs v4 for blocks it
// cannot take (attn_bwd_v5_fits).
#include <algorithm>
#include <climits>

#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_kernel.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_consumer_wide.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_docs.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_dq_warp.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_maps.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_producer.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_units.cuh"
#include "kernels/cuda/attention/persistent_unit_counter.h"
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
//     role, the docs warp, which classifies and prepares each stage's mask (attn_bwd_sm90ws_docs.cuh);
//   * the list mode (kList, with documents; attn_bwd_work_list.cu launches it): the units are (task, K/V head) of a
//     host-built backward work list, each visiting only its task's query tiles, with no set-up kernel
//     (attn_bwd_sm90ws_list.cuh).

// Overwrite mode with a split tail: zeroes the split items' dK / dV rows before their pieces add into them (one
// CTA per item, launched on the same stream before the kernel).
template <int D>
__global__ void zero_split_items_kernel(const AttnBwdParams p, const BwdV5Grid grid) {
  const BwdItem w = bwd_item(grid, p.Hkv, grid.full_items + blockIdx.x);
  zero_dk_dv_rows<D>(p, p.k_begin + w.kt * kBc, w.b, w.hk, int(threadIdx.x), int(blockDim.x));
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
  // Two key sources (p.k2_row > 0, documents and overwrite only): the first maps end at its own rows, the second's
  // hold the rest.
  const bool two = kDocs && p.k2_row > 0;
  const int64_t n2 = p.k_end - p.k2_row;
  RT_CHECK(!two || (p.k2_row % kBc == 0 && p.k2_row >= p.Nk && p.Nk >= kBc && n2 >= kBc && p.overwrite_dkv &&
                    p.k2 != nullptr && p.v2 != nullptr && p.dk2 != nullptr && p.dv2 != nullptr),
           "attn_bwd_ws: two key sources need k2_row a multiple of " << kBc << " at or past Nk = " << p.Nk
               << ", both sources >= " << kBc << " rows and the overwrite form (k2_row = " << p.k2_row << ")");
  const BwdV5Maps m = make_bwd_v5_maps<D, R>(p, B, two);
  const int n_sm = device_props().multiProcessorCount;  // `device` is current (stream_for in the dispatcher)
  const BwdV5Grid g = v5_grid(p, D, R, p.Hkv * B, tiles, n_sm);
  RT_CHECK(g.units + g.ctas <= INT_MAX, "attn_bwd_block (v5): " << g.units << " work units (key tiles x batch x "
                                            "K/V heads) do not fit 32 bits; split the batch or the key range");
  if (g.pieces > 1 && p.overwrite_dkv) {
    zero_split_items_kernel<D><<<unsigned((g.units - g.full_items) / g.pieces), 256, 0, stream>>>(p, g);
    CUDA_CHECK_LAUNCH();
  }
  if constexpr (kDocs) attn_doc_k128_spans(p.docs, B, stream);  // each unit's query span (attn_bwd_sm90ws_docs.cuh)
  int* next_unit = persistent_unit_counter(PersistentKernel::bwd_v5, device, stream);
  launch_dependent_kernel(attn_bwd_ws_kernel<D, kDocs, R>, dim3(unsigned(g.ctas)), dim3(kV5Threads), smem, stream,
                          m.q, m.dout, m.k, m.v, m.dq, m.dk, m.dv, m.k2, m.v2, m.dk2, m.dv2, p, g, next_unit,
                          BwdWorkListDev{});
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
