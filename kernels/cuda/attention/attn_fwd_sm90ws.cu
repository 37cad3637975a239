// attn_fwd_block on Hopper, warp-specialized (fwd v5, sm_90a): continues the fp32 online-softmax state
// (acc, m, l) with one K/V block. Same contract as fwd v4 (attn_fwd_sm90.cu) and the mma.sync kernels
// (attn_fwd_sm80.cu); attn_fwd_dispatch.cu chooses it.
//   * one CTA = 64 x kCons query rows of one (batch, head), chosen per call (fwd_ws_rows_for): kCons = 1 (64 rows,
//     256 threads, 2 CTAs per SM) for D = 64 calls without documents under 4K query rows; 3 (192 rows, 512 threads)
//     for D = 64 calls without documents of at least 4K query rows that fill the SMs as well; else 2 (128 rows, 384
//     threads), 1 CTA per SM:
//       - warpgroup 0, the producer: setmaxnreg.dec to 24; one thread loads Q once and the K/V tiles (128
//         keys) with TMA into a ring of kStages (2; 1 for 64-row tiles at D = 128) stages, K and V with separate
//         full/empty mbarriers;
//       - warpgroups 1 .. kCons, the consumers (setmaxnreg.inc to 160, 232 or 240): 64 query rows each, the S = Q K^T
//         / softmax / O += P V steps of attn_fwd_sm90_tile.cuh: S_{j+1} and P_j V_j are issued back to back;
//         with 1 or 2 warpgroups the softmax of S_{j+1} goes into a second P fragment (ptxas puts the wait for P_j V_j
//         ahead of it all the same, and forcing the overlap measured 1-2% slower: bench/NOTES.md "fwd v5: the
//         softmax back under P V"), with 3 it waits for both MMAs and writes P_{j+1} over P_j;
//   * the warp schedulers interleave the consumer warpgroups freely, one's softmax under the others' MMAs (a
//     pingpong order measured no faster: dev/attention/README.md); no CTA-wide barrier after the start;
//   * a consumer releases K_{j+1} once S_{j+1} is done and V_j once P_j V_j is done;
//   * TMA boxes: Q rows past q_end and K/V rows past k_end read as zero (the tensor maps' row extents end
//     there); keys at or past the CTA's last visible key in a tile are masked in the softmax.
//   * causal: key tiles wholly above the diagonal are never visited; heaviest query tiles launch first;
//   * launched as a dependent kernel (pdl.cuh): its CTAs take the SMs the previous kernel's tail leaves free.
// Rows outside [q_begin, q_end) are left untouched (by the plain block form; the fresh and finalized forms of
// attn_fwd_fused.cu write them: no_key_rows); a row that sees no key keeps m = -inf, l = 0; acc is
// not read for rows whose m is -inf.
// The files of fwd v5, one part each:
//   attn_fwd_sm90ws_layout.cuh     warpgroups, register split, K/V stages, shared memory and its mbarriers;
//   attn_fwd_sm90ws_grid.cuh       the CTAs of the rows outside [q_begin, q_end) and the rows no key reaches;
//   attn_fwd_sm90ws_kernel.cuh     the kernel: a CTA's query tile and key span, the barriers, the split into roles;
//   attn_fwd_sm90ws_producer.inc   warpgroup 0: TMA loads of Q and of the K/V ring (a fragment of the kernel);
//   attn_fwd_sm90ws_docs_warp.cuh  warp 1 of warpgroup 0, documents only: the key positions in shared memory;
//   attn_fwd_sm90ws_consumer.inc   warpgroups 1 .. kCons: S = Q K^T, softmax, O += P V (a fragment of the kernel);
//   this file                      the host side: tensor maps, grid and launch, the tile height, the entry points;
//   attn_fwd_work_list.cu / .cuh   the list mode (kList): the same kernel driven by a host-built work list.
#include <algorithm>
#include <climits>

#include "kernels/cuda/attention/attn_fwd_sm90.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_grid.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_kernel.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/attention/attn_variant.h"
#include "kernels/cuda/pdl.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgRowsPerCta (128), kWgKeysPerTile (128)

// With documents: (batch, head) pairs per window of the grid's order (attn_fwd_sm90ws_kernel.cuh): whole GQA groups
// of as many K/V heads as fit the L2 budget with their K and V (bf16, the call's key rows), as bwd v5's windows
// (16 MB, a third of an H100 / H200's L2); 1 where one K/V head's alone exceed it (the order before: head by head).
// The budget: AttnVariantOverride::fwd_doc_l2_kb (RT_ATTN_FWD_DOC_L2_KB, KiB; 0: head by head always).
int fwd_doc_head_window(const AttnFwdParams& p, int64_t D, int64_t B) {
  const int64_t budget = int64_t(attn_variant_override().fwd_doc_l2_kb) << 10;
  const int64_t kv_head_bytes = std::max<int64_t>(1, (p.k_end - p.k_begin) * D * 2 * 2);
  const int64_t kv_heads = budget / kv_head_bytes, pairs = B * p.H;
  if (kv_heads < 1) return 1;
  return int(std::min<int64_t>(pairs, kv_heads * p.group));
}

template <int D, bool kDocs, int kCons>
void launch(const AttnFwdParams& p, int64_t B, int device, cudaStream_t stream) {
  static_assert(kCons == 2 || (!kDocs && (kCons == 1 || D == 64)),
                "fwd v5: three consumer warpgroups only at D = 64; one or three only without documents");
  constexpr int kRows = 64 * kCons;
  constexpr size_t smem = WsSmem<D, kRows, kWsStages<D, kCons>>::kBytes;
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_ws_kernel<D, kDocs, kCons>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    configured[device_slot(device)] = true;
  }
  const int64_t tiles = (p.q_end - p.q_begin + kRows - 1) / kRows;
  RT_CHECK(tiles <= INT_MAX, "attn_fwd_block: too many query rows (" << p.q_end - p.q_begin << ")");
  RT_CHECK(p.q_end <= INT_MAX && p.k_end <= INT_MAX && p.H <= INT_MAX,
           "attn_fwd_block (ws): TMA coordinates are 32-bit; Nq = " << p.Nq << ", Nk = " << p.Nk);
  const CUtensorMap tq = make_rows_heads_tma_map(p.q, B, p.Nq, p.q_end, p.H, D, kRows);
  // Two key sources (p.k2_row > 0, documents only): the first map ends at its own rows, the second holds the rest.
  const bool two = kDocs && p.k2_row > 0;
  const int64_t k1_end = two ? p.Nk : p.k_end, n2 = p.k_end - p.k2_row;
  RT_CHECK(!two || (p.k2_row % kWgKeysPerTile == 0 && p.k2_row >= p.Nk && p.Nk >= kWgKeysPerTile &&
                    n2 >= kWgKeysPerTile && p.k2 != nullptr && p.v2 != nullptr),
           "attn_fwd_ws: two key sources need k2_row a multiple of " << kWgKeysPerTile << " at or past Nk = " << p.Nk
                                                                   << " and both sources >= " << kWgKeysPerTile
                                                                   << " rows (k2_row = " << p.k2_row << ")");
  const CUtensorMap tk = make_rows_heads_tma_map(p.k, B, p.Nk, k1_end, p.Hkv, D, kWgKeysPerTile);
  const CUtensorMap tv = make_rows_heads_tma_map(p.v, B, p.Nk, k1_end, p.Hkv, D, kWgKeysPerTile);
  const CUtensorMap tk2 = two ? make_rows_heads_tma_map(p.k2, B, n2, n2, p.Hkv, D, kWgKeysPerTile) : tk;
  const CUtensorMap tv2 = two ? make_rows_heads_tma_map(p.v2, B, n2, n2, p.Hkv, D, kWgKeysPerTile) : tv;
  // The fresh and finalized forms also own the rows outside [q_begin, q_end): extra CTAs before the query tiles.
  if constexpr (kDocs) attn_doc_q128_order(p.docs, B, p.q_begin, p.q_end, stream);  // spans, runs, launch order
  const int64_t extra = (p.fresh || p.out != nullptr) ? outside_tiles(p) : 0;
  RT_CHECK(tiles + extra <= INT_MAX, "attn_fwd_block: too many query rows (" << p.Nq << ")");
  const dim3 grid(unsigned(tiles + extra), unsigned(p.H), unsigned(B));
  const int head_window = kDocs ? fwd_doc_head_window(p, D, B) : 1;
  launch_dependent_kernel(attn_fwd_ws_kernel<D, kDocs, kCons>, grid, dim3(kWsThreads<kCons>), smem, stream, tq, tk,
                          tv, tk2, tv2, p, int(tiles), head_window, WsWorkList{});
}

}  // namespace

bool attn_fwd_ws_supported(int device, int64_t D) {
  if (D != 64 && D != 128) return false;
  static int cached[kMaxDevices] = {};  // per device: 0 unknown, 1 supported, 2 not
  int& c = cached[device_slot(device)];
  if (c == 0) {
    const bool ok = wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_fwd_ws_kernel<128, false, 2>));
    c = ok ? 1 : 2;
  }
  return c == 1;
}

// Query rows per CTA (bench/NOTES.md "fwd v5: 192-query tiles" and "fwd v5: 64-query tiles"), without
// documents (they keep 128):
//   * D = 64, fewer than 4K query rows: 64 (two CTAs per SM; the ring's 1-2K-row steps and 1K-row calls ran 7-9%
//     faster than with 128);
//   * D = 64, at least 4K query rows: 192 where 192-row CTAs fill the SMs about as well as 128-row ones (they run
//     ~10% faster per row at 4K-64K), else 128;
//   * D = 128: 128 (64-row tiles measured 0-2% slower in the 16K ring steps, 5-14% in whole calls of 4K-64K).
// The override forces 64 or 128 anywhere and 192 at D = 64 where the TMA box fits (q_end >= 192).
int fwd_ws_rows_for(int64_t D, bool docs, int64_t q_begin, int64_t q_end, int64_t B, int64_t H, int64_t n_sm,
                    int forced) {
  if (docs) return 128;
  if (forced == 64 || forced == 128) return forced;
  if (D != 64) return 128;
  if (forced == 192) return q_end >= 192 ? 192 : 128;
  const int64_t q = q_end - q_begin;
  if (q < 4096) return 64;
  const int64_t bh = H * B;
  const int64_t waves128 = ((q + 127) / 128 * bh + n_sm - 1) / n_sm;
  const int64_t waves192 = ((q + 191) / 192 * bh + n_sm - 1) / n_sm;
  return waves192 * 192 * 10 <= waves128 * 128 * 11 ? 192 : 128;
}

namespace {
int fwd_ws_rows(const AttnFwdParams& p, int64_t D, int64_t B) {
  // The SM count of the current device (stream_for in the op).
  return fwd_ws_rows_for(D, p.docs.on, p.q_begin, p.q_end, B, p.H, device_props().multiProcessorCount,
                         attn_variant_override().fwd_rows);
}
}  // namespace

void launch_attn_fwd_ws(const AttnFwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream) {
  RT_CHECK(D == 64 || D == 128, "attn_fwd_block (ws): head dim " << D << " is not 64 or 128");
  // A TMA box (the CTA's query rows, 128 keys) must not be longer than the tensor map's row extent (q_end,
  // k_end): such tiny blocks run fwd v4 (cp.async with zero-fill), which has the same contract and the same
  // requirements.
  RT_CHECK(p.k2_row == 0 || p.docs.on, "attn_fwd_block (ws): two key sources only with the document mask");
  if (p.q_end < kWgRowsPerCta || p.k_end < kWgKeysPerTile) {
    RT_CHECK(p.k2_row == 0, "attn_fwd_block (ws): two key sources need q_end and k_end >= 128");
    RT_CHECK(!p.fresh && p.out == nullptr, "attn_fwd_block (ws): a fused call (fresh state or finalized output) "
                                           "needs q_end and k_end >= 128; fwd v4 has no fused form");
    launch_attn_fwd_wgmma(p, D, B, device, stream);
    return;
  }
  if (p.docs.on) D == 64 ? launch<64, true, 2>(p, B, device, stream) : launch<128, true, 2>(p, B, device, stream);
  else {
    const int rows = fwd_ws_rows(p, D, B);
    if (D == 128) rows == 64 ? launch<128, false, 1>(p, B, device, stream) : launch<128, false, 2>(p, B, device, stream);
    else if (rows == 192) launch<64, false, 3>(p, B, device, stream);
    else if (rows == 64) launch<64, false, 1>(p, B, device, stream);
    else launch<64, false, 2>(p, B, device, stream);
  }
}

}  // namespace cuda
}  // namespace rt
