// attn_fwd_work_list on CUDA (kernels/attn_work_list.h has the op's contract): fwd v5's document-masked kernel
// (attn_fwd_sm90ws.cu) in its list mode, one launch per call with no set-up kernel (no summaries, spans, order or
// live-tile scan): a CTA per (task, head) unit, in the list's order within windows of heads, visits exactly its
// segments' key tiles; fill CTAs write out = 0, lse = -inf for the query tiles no task names
// (attn_fwd_work_list.cuh has the grid). Hopper only (fwd v5), D = 64 or 128, bf16 out. Split tasks store their
// parts' states into the caller's split scratch and the last part of a tile merges them in part order
// (attn_fwd_work_list_split.cuh); the bits below hold for unsplit lists only (a split list is within rounding).
// With ready flags (kernels/attn_ready_flags.h) the same kernel's kFlags instantiation runs: a unit waits for its
// gathered tiles' flags before loading them (attn_fwd_work_list_ready.cuh); the flags change when a tile is loaded,
// never what is computed, so the bits are the same once the flags have passed. With flags and free_sms = M > 0 (the
// default) its persistent form runs instead, leaving M SMs free for the rows' delivery
// (attn_fwd_work_list_persistent.cuh); the same unit code, so the same bits.
//
// Why the bits equal attn_fwd_whole_two_kv's (one source: attn_fwd_whole's, where its tiles start on the 128-row
// grid) when the list holds, per query tile, that call's key tiles less those fully masked for the tile:
//   * both run the same consumer code (S = Q K^T per 128-key tile, the online softmax, P V) on the same 128-row query
//     tile and the same 128-key tiles (two sources: that kernel's tiles start at a multiple of 128, as the list's),
//     in the same order (ascending list rows: own keys, then gathered);
//   * a tile fully masked for a row changes nothing for it: its scores are -inf, so mx = -inf, m is kept, alpha =
//     exp2(m - m) = 1 (or, before the row's first visible key, m = -inf, l = 0, O = 0 stay so with alpha = 0),
//     P = exp2(-inf) = 0 and O + 0 V = O: leaving such tiles out, or visiting tiles that call leaves out, gives the
//     same m, l and O;
//   * the element mask is exact in both: where the tile test says "every pair visible" no score is masked, otherwise
//     each pair is tested; so each visited tile's scores are the same whether the test used the per-call summaries
//     (64-row warpgroup, two 64-key summaries) or the list mode's ranges (the list's bounds of a 16-row warp and of
//     the 128-key tile, doc_work_list_bounds). That holds only while the list's bounds are the call's positions'
//     (a list built for other positions may call a partly visible tile wholly visible): RT_ATTN_WORK_LIST_CHECK=1
//     recomputes them from the device's positions.
// (Rows that see no key end as O = 0 · 0 and lse -inf in both; only the sign of such a zero could in principle
// differ, if an O accumulator of zeros ever came out -0.)
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/attn_ready_flags.h"
#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_doc_mask.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_grid.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_kernel.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list_fits.h"
#include "kernels/cuda/attention/attn_fwd_work_list_persistent.cuh"
#include "kernels/cuda/attention/persistent_unit_counter.h"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_variant.h"
#include "kernels/cuda/pdl.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgRowsPerCta, kWgKeysPerTile (128)

constexpr int kCons = 2;  // 128 query rows per CTA, as fwd v5 with documents

// Heads per window of the unit order: whole GQA groups of as many K/V heads as fit the L2 budget with their K and V
// over every sample (the list's tasks span the samples), as fwd_doc_head_window (attn_fwd_sm90ws.cu); 1 where one K/V
// head's exceed it. The budget: AttnVariantOverride::fwd_doc_l2_kb (RT_ATTN_FWD_DOC_L2_KB, KiB; 0: head by head).
int list_head_window(int64_t H, int64_t group, int64_t key_rows, int64_t D, int64_t B) {
  const int64_t budget = int64_t(attn_variant_override().fwd_doc_l2_kb) << 10;
  const int64_t kv_head_bytes = std::max<int64_t>(1, B * key_rows * D * 2 * 2);
  const int64_t kv_heads = budget / kv_head_bytes;
  if (kv_heads < 1) return 1;
  return int(std::min<int64_t>(H, kv_heads * group));
}

// RT_ATTN_WORK_LIST_CHECK=1: the list is copied to the host (a wait) and checked field by field before the launch,
// so that a bad list fails with an RT_CHECK instead of the kernel's trap.
bool host_check_requested() {
  const char* e = std::getenv("RT_ATTN_WORK_LIST_CHECK");
  return e != nullptr && e[0] != '\0' && e[0] != '0';
}

// The positions of (B, stride) i64 on the device, rows [0, rows) of each sample, to the host: (B, rows).
std::vector<int64_t> download_positions(const int64_t* dev, int64_t B, int64_t stride, int64_t rows,
                                        cudaStream_t stream) {
  std::vector<int64_t> host(size_t(B * rows));  // (B, rows)
  if (B == 1)
    CUDA_CHECK(cudaMemcpyAsync(host.data(), dev, size_t(rows) * 8, cudaMemcpyDeviceToHost, stream));
  else
    CUDA_CHECK(cudaMemcpy2DAsync(host.data(), size_t(rows) * 8, dev, size_t(stride) * 8, size_t(rows) * 8,
                                 size_t(B), cudaMemcpyDeviceToHost, stream));
  return host;
}

// The list's row bounds and key ranges against the device's positions (what doc_work_list_bounds computes on the
// host): the kernel's tile test trusts them.
void check_bounds_on_host(const AttnWorkList& wl, const AttnDocs& docs, const AttnDims& d, int64_t list_rows,
                          cudaStream_t stream, const char* op) {
  const std::vector<int64_t> q_pos = download_positions(docs.q_pos, d.B, docs.q_stride, d.Nq, stream);
  const std::vector<int64_t> q_doc = download_positions(docs.q_doc_start, d.B, docs.q_stride, d.Nq, stream);
  const std::vector<int64_t> k_pos = download_positions(docs.k_pos, d.B, docs.k_stride, list_rows, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const int64_t tiles = (list_rows + kWgKeysPerTile - 1) / kWgKeysPerTile;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < tiles; ++t) {
      int64_t lo = LLONG_MAX, hi = LLONG_MIN;
      for (int64_t j = t * kWgKeysPerTile; j < (t + 1) * kWgKeysPerTile; ++j) {
        const int64_t kp = k_pos[size_t(b * list_rows + std::min(j, list_rows - 1))];
        lo = std::min(lo, kp);
        hi = std::max(hi, kp);
      }
      const AttnKeyRange& r = wl.keys[size_t(b * tiles + t)];
      RT_CHECK(r.lo == lo && r.hi == hi, op << ": the list's key range of sample " << b << "'s key tile " << t << " is ["
                                            << r.lo << ", " << r.hi << "], its positions' [" << lo << ", " << hi
                                            << "]: build the list for this call's positions (doc_work_list_bounds)");
    }
  for (size_t n = 0; n < wl.tasks.size(); ++n)
    for (int64_t g = 0; g < kAttnWorkRowGroups; ++g) {
      const AttnWorkTask& task = wl.tasks[n];
      int64_t pos_lo = LLONG_MAX, doc_hi = LLONG_MIN;
      for (int64_t i = 0; i < kAttnWorkRowGroupRows; ++i) {
        const int64_t row = task.q_row + g * kAttnWorkRowGroupRows + i;
        const size_t at = size_t(task.sample * d.Nq + std::min(row, d.Nq - 1));
        pos_lo = std::min(pos_lo, q_pos[at]);
        doc_hi = std::max(doc_hi, q_doc[at]);
      }
      const AttnRowBounds& r = wl.rows[n * size_t(kAttnWorkRowGroups) + size_t(g)];
      RT_CHECK(r.pos_lo == pos_lo && r.doc_hi == doc_hi,
               op << ": task " << n << "'s row group " << g << " has the bounds (least position " << r.pos_lo
                  << ", greatest document start " << r.doc_hi << "), its rows' (" << pos_lo << ", " << doc_hi
                  << "): build the list for this call's positions (doc_work_list_bounds)");
    }
}

void check_list_on_host(const Tensor& list, const AttnDims& d, const AttnDocs& docs, int64_t list_rows, bool two,
                        int64_t tasks, int64_t slots, cudaStream_t stream, const char* op) {
  std::vector<int32_t> words(size_t(list.shape[0]));
  CUDA_CHECK(cudaMemcpyAsync(words.data(), list.data, words.size() * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const AttnWorkList wl = attn_work_list_from_words(words.data(), int64_t(words.size()));
  RT_CHECK(int64_t(wl.tasks.size()) == tasks,
           op << ": told " << tasks << " tasks, but the list holds " << wl.tasks.size() << "; pass its words[0]");
  const int64_t nqt = (d.Nq + kWgRowsPerCta - 1) / kWgRowsPerCta;
  const int64_t own_tiles = (d.Nk + kWgKeysPerTile - 1) / kWgKeysPerTile;
  const int64_t first_gathered = two ? attn_second_kv_row(d.Nk) / kWgKeysPerTile : own_tiles;
  const int64_t list_tiles = (list_rows + kWgKeysPerTile - 1) / kWgKeysPerTile;
  RT_CHECK(wl.merge_slots == slots,
           op << ": the list's tasks name " << wl.merge_slots << " merge slots, the caller passed split.slots = " << slots
              << (slots == 0 ? ": a list with split tasks needs an AttnSplitScratch (the attn_fwd_work_list overload "
                               "with split, kernels/attn_work_list.h), or build it unsplit (DocWorkListSplit::on = "
                               "false)"
                             : ": pass the list's merge_slots"));
  std::vector<unsigned> seen(size_t(d.B * nqt), 0u);  // (B, nqt) bit p: part p seen; bit 8: an unsplit task
  std::vector<char> slot_used(size_t(slots), 0);       // (slots)
  for (size_t t = 0; t < wl.tasks.size(); ++t) {
    const AttnWorkTask& task = wl.tasks[t];
    const bool split = task.parts > 1;
    RT_CHECK(task.parts >= 1 && task.parts <= kAttnWorkMaxParts && task.part >= 0 && task.part < task.parts &&
                 (split ? task.merge_slot >= task.part && task.merge_slot < slots : task.merge_slot == -1),
             op << ": task " << t << " has part " << int(task.part) << ", parts " << int(task.parts)
                << ", merge_slot " << task.merge_slot << ": parts 1 to 8, the slot -1 when unsplit, else in [part, "
                << slots << ")");
    RT_CHECK(task.sample >= 0 && task.sample < d.B && task.q_row >= 0 && task.q_row < d.Nq &&
                 task.q_row % kWgRowsPerCta == 0,
             op << ": task " << t << " (sample " << task.sample << ", q_row " << task.q_row
                << ") is not a 128-row query tile of the call's B=" << d.B << ", Nq=" << d.Nq);
    unsigned& s = seen[size_t(task.sample * nqt + task.q_row / kWgRowsPerCta)];
    const unsigned bit = split ? 1u << task.part : 1u << 8;
    RT_CHECK(!(s & bit) && (split ? !(s & (1u << 8)) : s == 0u),
             op << ": task " << t << " names query tile " << task.q_row << " of sample " << task.sample
                << " again (a tile has one unsplit task or its parts once each)");
    s |= bit;
    if (split) {
      RT_CHECK(!slot_used[size_t(task.merge_slot)], op << ": task " << t << "'s merge slot " << task.merge_slot
                                                        << " is another part's too");
      slot_used[size_t(task.merge_slot)] = 1;
    }
    RT_CHECK(task.segs >= 1 && task.first_seg >= 0 && int64_t(task.first_seg) + task.segs <= int64_t(wl.segs.size()),
             op << ": task " << t << " names segments [" << task.first_seg << ", " << task.first_seg + task.segs
                << ") of " << wl.segs.size());
    int64_t next = 0;
    for (int i = task.first_seg; i < task.first_seg + task.segs; ++i) {
      const AttnKeySeg& seg = wl.segs[size_t(i)];
      const int64_t lo = seg.first_tile, hi = lo + seg.tiles;
      const bool own = seg.source == -1, gathered = two && seg.source == 0;
      RT_CHECK(seg.tiles >= 1 && lo >= next && (own || gathered) &&
                   (own ? hi <= own_tiles : lo >= first_gathered && hi <= list_tiles),
               op << ": task " << t << "'s segment " << i << " (tiles [" << lo << ", " << hi << "), source "
                  << int(seg.source) << ") is out of range or order: own tiles are [0, " << own_tiles
                  << "), gathered tiles (source 0) [" << first_gathered << ", " << list_tiles
                  << "), ascending without overlap");
      next = hi;
    }
  }
  if (wl.tasks.empty()) return;  // no unit runs: the bounds are not read
  const int64_t list_tiles_all = (list_rows + kWgKeysPerTile - 1) / kWgKeysPerTile;
  RT_CHECK(int64_t(wl.keys.size()) == d.B * list_tiles_all,
           op << ": the list holds " << wl.keys.size() << " key ranges, the call's B x key tiles are " << d.B << " x "
              << list_tiles_all << "; build the list for this call (doc_work_list)");
  check_bounds_on_host(wl, docs, d, list_rows, stream, op);
}

// The persistent form's CTAs for M free SMs: (SMs - M) x the kernel's CTAs per SM (per device, found once).
template <typename Kernel>
int64_t persistent_ctas(Kernel* kernel, size_t smem, int device, int free_sms, const char* op) {
  static std::mutex mutex;
  static int sms[kMaxDevices] = {}, per_sm[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  const int slot = device_slot(device);
  if (sms[slot] == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&sms[slot], cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm[slot], kernel, kWsThreads<kCons>, smem));
  }
  RT_CHECK(per_sm[slot] >= 1, op << ": the persistent list kernel fits no SM (occupancy 0)");
  RT_CHECK(free_sms < sms[slot], op << ": the ready flags' free_sms = " << free_sms << " leaves none of the device's "
                                    << sms[slot] << " SMs to the kernel; pass fewer (0: one CTA per unit)");
  return int64_t(sms[slot] - free_sms) * per_sm[slot];
}

// free_sms > 0 (kFlags only): the persistent form on min(units, (SMs - free_sms) x CTAs per SM) CTAs.
template <int D, bool kFlags>
void launch(const AttnFwdParams& p, int64_t B, const WsWorkList& wl, int head_window, int free_sms, int device,
            cudaStream_t stream) {
  constexpr int kRows = 64 * kCons;
  constexpr size_t smem = WsSmem<D, kRows, kWsStages<D, kCons>>::kBytes;
  auto* kernel = attn_fwd_ws_kernel<D, true, kCons, true, kFlags>;
  auto* persistent = attn_fwd_ws_list_persistent_kernel<D>;
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    CUDA_CHECK(cudaFuncSetAttribute(persistent, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured[device_slot(device)] = true;
  }
  const bool two = p.k2_row > 0;
  const int64_t k1_end = two ? p.Nk : p.k_end, n2 = p.k_end - p.k2_row;
  const CUtensorMap tq = make_rows_heads_tma_map(p.q, B, p.Nq, p.q_end, p.H, D, kRows);
  const CUtensorMap tk = make_rows_heads_tma_map(p.k, B, p.Nk, k1_end, p.Hkv, D, kWgKeysPerTile);
  const CUtensorMap tv = make_rows_heads_tma_map(p.v, B, p.Nk, k1_end, p.Hkv, D, kWgKeysPerTile);
  const CUtensorMap tk2 = two ? make_rows_heads_tma_map(p.k2, B, n2, n2, p.Hkv, D, kWgKeysPerTile) : tk;
  const CUtensorMap tv2 = two ? make_rows_heads_tma_map(p.v2, B, n2, n2, p.Hkv, D, kWgKeysPerTile) : tv;
  const int64_t nqt = (p.Nq + kRows - 1) / kRows, slots = B * nqt;
  // Fill CTAs only where some (sample, query tile) slot may have no task: a valid unsplit list holds at most one task
  // per slot, so T = B x ceil(Nq / 128) names every one. With splits the host does not know how many tiles the tasks
  // cover: fill CTAs always (they scan the tasks and leave).
  const int64_t fill = wl.tasks == slots && wl.split_slots == 0
                           ? 0
                           : (slots + kWorkListFillSlots - 1) / kWorkListFillSlots;
  const int64_t ctas = p.H * wl.tasks + fill;
  RT_CHECK(ctas <= INT_MAX, "attn_fwd_work_list: H x T = " << p.H * wl.tasks << " units do not fit one grid");
  if (ctas == 0) return;
  if (kFlags && free_sms > 0) {
    WsPersistent ps;
    ps.units = int(ctas);
    ps.ctas = int(std::min(ctas, persistent_ctas(persistent, smem, device, free_sms, "attn_fwd_work_list")));
    ps.next_unit = persistent_unit_counter(PersistentKernel::fwd_work_list, device, stream);
    launch_dependent_kernel(persistent, dim3(unsigned(ps.ctas)), dim3(kWsThreads<kCons>), smem, stream, tq, tk, tv,
                            tk2, tv2, p, int(nqt), head_window, wl, ps);
    return;
  }
  launch_dependent_kernel(kernel, dim3(unsigned(ctas)), dim3(kWsThreads<kCons>), smem, stream, tq, tk, tv, tk2, tv2,
                          p, int(nqt), head_window, wl);
}

}  // namespace

int64_t attn_fwd_work_list_head_window(int64_t H, int64_t Hkv, int64_t key_rows, int64_t D, int64_t B) {
  RT_CHECK(H >= 1 && Hkv >= 1 && H % Hkv == 0, "attn_fwd_work_list_head_window: H = " << H << ", Hkv = " << Hkv);
  return list_head_window(H, H / Hkv, key_rows, D, B);
}

void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse, const AttnSplitScratch& split, const AttnReadyFlags& ready) {
  const char* op = "attn_fwd_work_list";
  cudaStream_t stream = stream_for(q, op);
  int64_t list_rows = 0;
  const AttnDims d = attn_work_list_dims(q, k, v, k2, v2, mask, list, list_rows, op);
  attn_dims(q, k, v, op);  // bf16 on q's device, D 64 or 128
  const bool two = k2.defined() && k2.shape[1] > 0;
  const int64_t Nk2 = two ? k2.shape[1] : 0;
  if (two) {
    require_attn_tensor(k2, DType::bf16, q.device, op, "k2");
    require_attn_tensor(v2, DType::bf16, q.device, op, "v2");
  }
  require_attn_tensor(out, DType::bf16, q.device, op, "out");
  require_dtype_on(lse, DType::f32, q.device, op, "lse");
  check_shape(out, {d.B, d.Nq, d.H, d.D}, op, "out (B,Nq,H,D)");
  check_shape(lse, {d.B, d.H, d.Nq}, op, "lse (B,H,Nq)");
  check_attn_state_shapes(d, scratch, op);  // the contract's; this kernel keeps its state in registers
  if (d.B == 0 || d.H == 0 || d.Nq == 0) return;
  const int device = q.device.index;
  // The device and shape rules (sm_90a, the TMA boxes, the key tiles, 32-bit coordinates, the grid), the same that
  // attn_fwd_work_list_runs asks: attn_fwd_work_list_fits.cu.
  std::string refused;
  RT_CHECK(attn_fwd_work_list_fits(device, d.B, d.H, d.D, d.Nq, d.Nk, Nk2, list_rows, &refused), op << ": " << refused);
  const int64_t key_rows = two ? list_rows : d.Nk;  // one source: k's rows only (a 0-row k2 adds none)
  RT_CHECK(list.shape[0] <= INT_MAX, op << ": the list's " << list.shape[0] << " words exceed 2^31");
  // The sections' offsets from what the host knows (kernels/attn_work_list.h; the kernel checks the header against
  // them): T tasks, then per task 8 row bounds, per sample and key tile a key range, the rest segments.
  const int64_t nqt = (d.Nq + kWgRowsPerCta - 1) / kWgRowsPerCta;
  const int64_t key_tiles = (key_rows + kWgKeysPerTile - 1) / kWgKeysPerTile;
  // A list without tasks runs fill CTAs only, which read no section (its words[3] may be 0 or B x key tiles).
  const int64_t segs_at = tasks > 0 ? 4 + 36 * tasks + 4 * d.B * key_tiles : 4;
  RT_CHECK(tasks >= 0 && tasks <= d.B * nqt + split.slots,
           op << ": " << tasks << " tasks; a list has at most one per 128-row query tile (B x " << nqt
              << ") plus one per merge slot (split.slots = " << split.slots << "; a list with splits needs its merge "
              << "slots passed, kernels/attn_work_list.h AttnSplitScratch)");
  if (split.slots > 0) {  // the split merge's scratch (kernels/attn_work_list.h AttnSplitScratch)
    const std::string fix = " (allocate them on q's device as attn_split_state_shape(slots, H, D) f32 and "
                            "attn_split_count_shape(slots, H) i32, the count zeroed once)";
    RT_CHECK(split.state.defined() && split.count.defined(),
             op << ": the list has " << split.slots << " merge slots (split tasks) but no split scratch: pass "
                << "AttnSplitScratch{state, count, slots}" << fix << ", or build the list without splits "
                << "(DocWorkListSplit::on = false)");
    require_dtype_on(split.state, DType::f32, q.device, op, "split.state");
    require_dtype_on(split.count, DType::i32, q.device, op, "split.count");
    RT_CHECK(split.state.ndim == 4 && split.state.shape[0] >= split.slots && split.state.shape[1] == d.H &&
                 split.state.shape[2] == kAttnWorkTileRows && split.state.shape[3] == d.D + 2 &&
                 split.count.ndim == 3 && split.count.shape[0] >= split.slots && split.count.shape[1] == d.H &&
                 split.count.shape[2] == kAttnWorkRowGroups,
             op << ": split.state " << split.state.shape_str() << " and split.count " << split.count.shape_str()
                << " must be at least (" << split.slots << ", " << d.H << ", 128, " << d.D + 2 << ") and ("
                << split.slots << ", " << d.H << ", 8) for the list's " << split.slots << " merge slots" << fix);
    RT_CHECK(split.slots <= INT_MAX, op << ": " << split.slots << " merge slots");
  }
  RT_CHECK(list.shape[0] >= segs_at && (tasks == 0 || (list.shape[0] - segs_at) % 2 == 0),
           op << ": the list's " << list.shape[0] << " words cannot hold " << tasks << " tasks and the call's " << d.B
              << " x " << key_tiles << " key ranges (4 + 36 T + 4 B tiles + 2 S words): build it for this call with "
              << "attn_work_list_words (kernels/attn_work_list.h) and pass its task count");
  RT_CHECK(reinterpret_cast<uintptr_t>(list.data) % 16 == 0,
           op << ": the list's words must be 16-byte aligned (the kernel reads its bounds as 16-byte vectors)");
  require_device_positions(mask.docs.q_pos, device, op, "q_pos");
  require_device_positions(mask.docs.q_doc_start, device, op, "q_doc_start");
  require_device_positions(mask.docs.k_pos, device, op, "k_pos");
  check_attn_ready_flags(ready, q.device, op);
  if (host_check_requested()) check_list_on_host(list, d, mask.docs, key_rows, two, tasks, split.slots, stream, op);

  AttnFwdParams p;
  p.q = q.ptr<__nv_bfloat16>();
  p.k = k.ptr<__nv_bfloat16>();
  p.v = v.ptr<__nv_bfloat16>();
  p.acc = p.m = p.l = nullptr;  // no state: fresh in, finalized out
  p.Nq = d.Nq, p.Nk = d.Nk, p.H = d.H, p.Hkv = d.Hkv, p.group = d.group;
  p.q_begin = 0, p.q_end = d.Nq, p.k_begin = 0, p.k_end = key_rows;
  p.diag = 0;
  p.causal = false;
  p.scale2 = float(1.0 / std::sqrt(double(d.D))) * kLog2e;
  p.num_q_tiles = 0;
  p.docs.on = true;  // the positions only: the list replaces the summaries, spans and order
  p.docs.q_pos = mask.docs.q_pos;
  p.docs.q_doc = mask.docs.q_doc_start;
  p.docs.k_pos = mask.docs.k_pos;
  p.docs.q_stride = mask.docs.q_stride;
  p.docs.k_stride = mask.docs.k_stride;
  p.fresh = true;
  p.out = out.ptr<__nv_bfloat16>();
  p.lse = lse.ptr<float>();
  if (two) {
    p.k2_row = attn_second_kv_row(d.Nk);
    p.k2 = k2.ptr<__nv_bfloat16>();
    p.v2 = v2.ptr<__nv_bfloat16>();
  }
  WsWorkList wl;
  wl.words = list.ptr<int32_t>();
  wl.n_words = int(list.shape[0]);
  wl.B = int(d.B);
  wl.tasks = int(tasks);
  wl.key_tiles = tasks > 0 ? int(key_tiles) : 0;  // a list without tasks holds no key range (words[3] = 0)
  wl.segs = tasks > 0 ? int((list.shape[0] - segs_at) / 2) : 0;
  if (split.slots > 0) {
    wl.split_state = split.state.ptr<float>();
    wl.split_count = split.count.ptr<int32_t>();
    wl.split_slots = int(split.slots);
  }
  if (ready.on()) {  // the flags instantiation (attn_fwd_work_list_ready.cuh)
    wl.ready = static_cast<const unsigned*>(ready.ready.data);
    wl.n_ready = int(ready.ready.shape[0]);
    wl.epoch = ready.epoch;
    wl.timeout_ns = attn_ready_timeout_ns(ready.timeout_s, op);
    wl.fault = static_cast<unsigned long long*>(ready.fault.data);
  }
  const int window = list_head_window(d.H, d.group, key_rows, d.D, d.B);
  const int free_sms = ready.on() ? attn_ready_free_sms(ready) : 0;  // without flags: one CTA per unit, as always
  if (d.D == 64) ready.on() ? launch<64, true>(p, d.B, wl, window, free_sms, device, stream)
                            : launch<64, false>(p, d.B, wl, window, free_sms, device, stream);
  else ready.on() ? launch<128, true>(p, d.B, wl, window, free_sms, device, stream)
                  : launch<128, false>(p, d.B, wl, window, free_sms, device, stream);
  // RT_ATTN_WORK_LIST_CHECK=1: wait for the call and raise a timed-out wait here (the caller's own check is
  // attn_ready_fault_check at its next host wait, kernels/attn_ready_flags.h).
  if (ready.on() && host_check_requested()) attn_ready_fault_check(ready, op);
}

}  // namespace cuda
}  // namespace rt
