// fwd v5's list mode (attn_fwd_ws_kernel<D, true, 2, true>, host side in attn_fwd_work_list.cu): the device pieces that
// read the work list (kernels/attn_work_list.h) instead of the per-call document set-up (summaries, q128 spans and
// order, doc_live_key_tiles). A CTA is one (task, head) unit or a fill CTA:
//   * units: blockIdx.x in [0, H x T), T the list's task count, which the host passes (it built the list): unit d runs
//     one (task, head) pair in windows of W heads (fwd_doc_head_window's L2 rule, over heads only, as the list spans
//     every sample): window w holds heads [w W, w W + W), its units task-major with the heads fastest, so the list's
//     order (heaviest first) holds inside each window;
//   * fill CTAs after them (none when T is every (sample, query tile) slot): one per 32 slots, writing out = 0, lse =
//     -inf for every head of the slots no task names (the host list leaves out tiles that see no key).
// A unit's key tiles (its segments expanded, in order) go into shared memory as the kernel's `live` list, so the
// producer, the docs warp and the consumers run over them as over a document CTA's live tiles. The tile test's ranges
// come from the list too (doc_work_list_bounds): each consumer warp's rows' least position and greatest document start
// (list_doc_rows), each key tile's least and greatest position (list_tile_keys, read a tile ahead as fwd_doc_keys
// reads the summaries), so the docs warp only writes the keys' positions, as in the document kernel.
// A list that does not fit the call (counts, tag, ranges, order, a split task without the split scratch) stops the
// kernel (__trap(): the launch fails with an unspecified launch failure). Set RT_ATTN_WORK_LIST_CHECK=1 to have the host check the list first (a
// device-to-host copy and a wait per call) and fail with an RT_CHECK naming the task and the field. Included by
// attn_fwd_sm90ws_kernel.cuh; keep C++17.
#pragma once
#include <cstdint>

#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_doc_mask.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_grid.cuh"
#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {

// The list of a list-mode launch (a kernel argument; words null for every other instantiation). The host fills the
// counts from what it knows (the task count it was given, the call's key tiles, the words' length); the kernel checks
// the words' own header against them (work_list_unit).
struct WsWorkList {
  const int32_t* words = nullptr;  // (n_words) i32, 16-byte aligned: attn_work_list_words (a 4-word header, 4 per
                                   // task, 32 row-bound words per task, 4 per key range, 2 per segment)
  int n_words = 0;
  int B = 0;          // samples of the call
  int tasks = 0;      // T: the list's tasks (words[0]); the grid holds H x T units
  int key_tiles = 0;  // the call's 128-row key tiles per sample: the list holds B x key_tiles key ranges (words[3])
  int segs = 0;       // S = (n_words - 4 - 36 T - 4 B key_tiles) / 2 (words[1])
  // Split tasks (kernels/attn_work_list.h "Splits"; attn_fwd_work_list_split.cuh): the host's AttnSplitScratch.
  float* split_state = nullptr;  // (split_slots, H, 128, D + 2) f32: each part's unnormalized O, m, l per row
  int* split_count = nullptr;    // (split_slots, H, 8) i32: parts landed per (tile's first slot, head, 16-row group)
  int split_slots = 0;           // the list's merge slots; 0: a split task stops the kernel
  // Ready flags (kernels/attn_ready_flags.h; read by the flags instantiation only, attn_fwd_work_list_ready.cuh).
  const unsigned* ready = nullptr;       // (n_ready) u32: source s's gathered rows are in once ready[s] == epoch
  int n_ready = 0;                       // 1 .. kAttnReadySourcesMax
  unsigned epoch = 0;                    // this call's exchange
  unsigned long long timeout_ns = 0;     // the watchdog's limit per wait
  unsigned long long* fault = nullptr;   // the fault word (attn_ready_fault_word, atomicMax)
  // Word offsets of the sections (kernels/attn_work_list.h): tasks at 4, then the rest.
  __host__ __device__ int rows_at() const { return 4 + 4 * tasks; }      // (T, 8) AttnRowBounds
  __host__ __device__ int keys_at() const { return 4 + 36 * tasks; }     // (B, key_tiles) AttnKeyRange
  __host__ __device__ int segs_at() const { return keys_at() + 4 * B * key_tiles; }  // (S) AttnKeySeg
};

// A unit's key tiles are expanded into shared memory as 16-bit tile indices: the call's key list may hold at most this
// many 128-row tiles (1M rows; the host refuses longer lists).
constexpr int kWorkListTilesMax = 8192;
constexpr int kWorkListFillSlots = 32;  // (sample, query tile) slots per fill CTA (one u32 of coverage bits)

namespace {

using namespace wgfwd;  // kWgRowsPerCta, kWgKeysPerTile (128), FwdDocKeys

struct WorkListScratch {                           // shared memory, one per CTA
  unsigned short tiles[kWorkListTilesMax];         // the unit's key tiles in visit order (the kernel's `live`)
  int seg_end[512], seg_first[512], seg_last[512];  // per segment of a chunk: end offset, first tile, end tile
  int warp_total[16];
  unsigned covered;                                // fill CTAs: bit k = slot s0 + k has a task
};

__device__ __forceinline__ WorkListScratch& work_list_scratch() {
  __shared__ WorkListScratch s;
  return s;
}

// What a unit CTA runs: task `task` of the list, sample b, head h, query tile `tile` (rows 128 tile ..), segments
// [first_seg, first_seg + segs).
struct WorkListUnit {
  int64_t b, h;
  int task, tile, first_seg, segs;
};

// A list that does not fit the call stops the kernel. No message: a printf (a function call) anywhere in the kernel
// makes ptxas serialize its wgmma pipeline (C7510); the host check (RT_ATTN_WORK_LIST_CHECK=1) names the field.
// `what`, `task` and `value` document the check at the call site only.
__device__ __forceinline__ void work_list_fault(const char* /*what*/, long long /*task*/, long long /*value*/) {
  __trap();
}

// The persistent form's rows of a fill unit: out = 0 (bf16) and lse = -inf for rows [r0, r1) of sample b, head h
// (the list mode's no_key_rows: fresh and finalized), written by `writers` threads, this one `tid` of them.
template <int D>
__device__ void work_list_fill_rows(const AttnFwdParams& p, int64_t b, int64_t h, int64_t r0, int64_t r1, int tid,
                                    int writers) {
  constexpr int kVecs = D / 8;  // uint4 (8 bf16) per row
  const int n = int(r1 - r0) * kVecs;
  for (int i = tid; i < n; i += writers) {
    const int64_t row = r0 + i / kVecs;
    const int c = (i % kVecs) * 8;
    *reinterpret_cast<uint4*>(p.out + ((b * p.Nq + row) * p.H + h) * D + c) = make_uint4(0u, 0u, 0u, 0u);
    if (c == 0) p.lse[(b * p.H + h) * p.Nq + row] = -INFINITY;
  }
}

// Fill CTA f: out = 0, lse = -inf (no_key_rows of the fresh, finalized form) for every head of the slots
// [32 f, 32 f + 32) (slot = sample * nqt + query tile) that no task names. Every thread calls it. kPart (the
// persistent form): threads [0, writers) write the rows (tid: this thread's index among them, -1: none), so that its
// producer warpgroup, at 24 registers, only meets the barriers.
template <int D, bool kPart = false>
__device__ void work_list_fill(const AttnFwdParams& p, const WsWorkList& wl, int nqt, int64_t f, int tid = 0,
                               int writers = 0) {
  WorkListScratch& sh = work_list_scratch();
  const int64_t slots = int64_t(wl.B) * nqt, s0 = f * kWorkListFillSlots;
  const int T = wl.tasks;  // the host's count (the words hold at least T tasks); a mismatch is the units' to report
  if (threadIdx.x == 0) sh.covered = 0u;
  __syncthreads();
  for (int i = int(threadIdx.x); i < T; i += int(blockDim.x)) {
    const int32_t* t = wl.words + 4 + 4 * int64_t(i);
    const int64_t q_row = t[0], sample = int16_t(t[1] & 0xffff);
    const int64_t slot = q_row >= 0 ? sample * nqt + q_row / kWgRowsPerCta : -1;
    if (slot >= s0 && slot < s0 + kWorkListFillSlots) atomicOr(&sh.covered, 1u << int(slot - s0));
  }
  __syncthreads();
  const unsigned covered = sh.covered;
  for (int k = 0; k < kWorkListFillSlots && s0 + k < slots; ++k) {
    if ((covered >> k) & 1u) continue;
    const int64_t b = (s0 + k) / nqt, r0 = (s0 + k) % nqt * kWgRowsPerCta, r1 = min(r0 + kWgRowsPerCta, p.Nq);
    if constexpr (kPart) {
      if (tid >= 0)
        for (int64_t h = 0; h < p.H; ++h) work_list_fill_rows<D>(p, b, h, r0, r1, tid, writers);
    } else {
      for (int64_t h = 0; h < p.H; ++h) no_key_rows<D>(p, b, h, r0, r1);
    }
  }
}

// Which unit the grid's CTA d is (true) or that it has none (false: a fill CTA, done here; kPart, fill_tid and
// fill_writers as work_list_fill's); d = blockIdx.x, or in the persistent form the unit it took
// (attn_fwd_work_list_persistent.cuh). Checks the words' header against the host's counts and the task's fields
// (every thread reads the same words, so every thread decides the same).
template <int D, bool kPart = false>
__device__ __forceinline__ bool work_list_unit(const AttnFwdParams& p, const WsWorkList& wl, int nqt, int window,
                                               int64_t d, WorkListUnit& u, int fill_tid = 0, int fill_writers = 0) {
  const int64_t slots = int64_t(wl.B) * nqt, units = p.H * wl.tasks;
  if (d >= units) {
    work_list_fill<D, kPart>(p, wl, nqt, d - units, fill_tid, fill_writers);
    return false;
  }
  const int T = wl.tasks, S = wl.segs;
  if (wl.words[0] != T || wl.words[1] != S || wl.words[2] != kAttnFwdWorkListTag ||
      wl.words[3] != wl.B * wl.key_tiles || T > slots + wl.split_slots)
    work_list_fault("the header (words[0] tasks, words[1] segments, words[2] the forward tag, words[3] key ranges) "
                    "does not match the host's task count, the words' length and the call's key tiles, or the tasks "
                    "exceed one per query tile plus one per merge slot; value = words[0]",
                    -1, wl.words[0]);
  const int64_t w = d / (int64_t(window) * T), rem = d % (int64_t(window) * T);
  const int64_t width = min(int64_t(window), p.H - w * window);  // the last window may hold fewer heads
  const int task = int(rem / width);
  u.h = w * window + rem % width;
  const int32_t* t = wl.words + 4 + 4 * int64_t(task);
  const int32_t q_row = t[0], w1 = t[1], w3 = t[3];
  const int sample = int16_t(w1 & 0xffff), part = int8_t((w1 >> 16) & 0xff), parts = int8_t((w1 >> 24) & 0xff);
  const int segs = int16_t(w3 & 0xffff), merge_slot = int16_t((w3 >> 16) & 0xffff);
  u.task = task;
  u.first_seg = t[2];
  u.segs = segs;
  if (parts < 1 || parts > kAttnWorkMaxParts || part < 0 || part >= parts)
    work_list_fault("parts must be 1 to 8 and part below it (value = parts)", task, parts);
  if (parts == 1 ? merge_slot != -1 : merge_slot < part || merge_slot >= wl.split_slots)
    work_list_fault("merge_slot must be -1 unsplit, else in [part, split slots): a list with splits needs the split "
                    "scratch (value = merge_slot)",
                    task, merge_slot);
  if (sample < 0 || sample >= wl.B) work_list_fault("sample out of range (value = sample)", task, sample);
  if (q_row < 0 || q_row >= p.Nq || q_row % kWgRowsPerCta != 0)
    work_list_fault("q_row is not a 128-row query tile of the call (value = q_row)", task, q_row);
  if (segs < 1 || u.first_seg < 0 || int64_t(u.first_seg) + segs > S)
    work_list_fault("segments [first_seg, first_seg + segs) out of range (value = first_seg)", task, u.first_seg);
  u.b = sample;
  u.tile = q_row / kWgRowsPerCta;
  return true;
}

// Expands the unit's segments into sh.tiles (tile indices of the key list, in order) and returns their count. Checks
// each segment: tiles >= 1; source -1 within the own tiles [0, ceil(Nk / 128)), source 0 (two sources only) within the
// gathered ones [k2_row / 128, ceil(k_end / 128)); ascending without overlap. Every thread of the block (kThreads)
// calls it; it synchronises the block.
template <int kThreads>
__device__ __forceinline__ int work_list_tiles(const AttnFwdParams& p, const WsWorkList& wl, const WorkListUnit& u,
                                               WorkListScratch& sh) {
  static_assert(kThreads % 32 == 0 && kThreads <= 512, "work_list_tiles: whole warps, at most 512 threads");
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const bool two = p.k2_row > 0;
  const int own_tiles = int((p.Nk + kWgKeysPerTile - 1) / kWgKeysPerTile);
  const int list_tiles = int((p.k_end + kWgKeysPerTile - 1) / kWgKeysPerTile);
  const int first_gathered = two ? int(p.k2_row / kWgKeysPerTile) : list_tiles;
  const int32_t* segw = wl.words + wl.segs_at() + 2 * int64_t(u.first_seg);  // (segs, 2) i32
  int total = 0, prev_last = 0;  // tiles so far; the tile after the previous chunk's last segment
  for (int c0 = 0; c0 < u.segs; c0 += kThreads) {
    const int i = c0 + tid, m = min(kThreads, u.segs - c0);
    int first = 0, n = 0, src = -1;
    if (i < u.segs) {
      first = segw[2 * i];
      const int32_t w = segw[2 * i + 1];
      n = int16_t(w & 0xffff);
      src = int8_t((w >> 16) & 0xff);
    }
    int x = n;  // inclusive scan over the chunk: the warp's, then the warps before
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    if (c0 > 0) __syncthreads();  // the previous chunk's readers are done
    if (lane == 31) sh.warp_total[warp] = x;
    __syncthreads();
    int before = 0, chunk = 0;
    for (int v = 0; v < kThreads / 32; ++v) {
      const int c = sh.warp_total[v];
      if (v < warp) before += c;
      chunk += c;
    }
    if (i < u.segs) {
      sh.seg_end[tid] = before + x;
      sh.seg_first[tid] = first;
      sh.seg_last[tid] = first + n;
    }
    __syncthreads();
    bool bad = false;
    if (i < u.segs) {
      const int prev_end = tid > 0 ? sh.seg_last[tid - 1] : prev_last;
      const bool own = src == -1, gathered = two && src == 0;
      bad = n < 1 || first < prev_end || !(own || gathered) ||
            (own ? first + n > own_tiles : first < first_gathered || first + n > list_tiles);
    }
    if (__syncthreads_or(bad)) work_list_fault("a segment is empty, out of its source's tiles or out of order", -1, i);
    if (total + chunk > kWorkListTilesMax) work_list_fault("more key tiles than the kernel holds", -1, total + chunk);
    for (int idx = tid; idx < chunk; idx += kThreads) {  // the chunk's segment holding tile idx: binary search
      int lo = 0, hi = m - 1;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (sh.seg_end[mid] > idx) hi = mid;
        else lo = mid + 1;
      }
      const int start = lo > 0 ? sh.seg_end[lo - 1] : 0;
      sh.tiles[total + idx] = static_cast<unsigned short>(sh.seg_first[lo] + idx - start);
    }
    prev_last = sh.seg_last[m - 1];
    total += chunk;
  }
  __syncthreads();
  return total;
}

// The document-mask rows of one consumer thread in the list mode: its two rows' positions and document starts (as
// fwd_doc_rows reads them), and as the tile test's range the list's bounds of its warp's 16 rows (AttnRowBounds of
// row group `group` of the unit's task: least position, greatest document start), with pos_hi = +max and doc_lo =
// -max: softmax_tile only asks whether every pair is visible, and those constants fold its "no pair visible" branch
// away. Broadcast from lane 0, so that the compiler knows they are warp-uniform (uniform registers).
__device__ __forceinline__ void list_doc_rows(const AttnFwdParams& p, const WsWorkList& wl, const WorkListUnit& u,
                                              int64_t q0, int lrow0, int group, FwdDocRows& r) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = u.b * p.docs.q_stride + min(q0 + lrow0 + 8 * i, p.q_end - 1);
    r.pos[i] = p.docs.q_pos[row];
    r.doc[i] = p.docs.q_doc[row];
  }
  const longlong2 bounds = __ldg(reinterpret_cast<const longlong2*>(wl.words + wl.rows_at()) +
                                 (int64_t(u.task) * kAttnWorkRowGroups + group));
  const int64_t pos_lo = __shfl_sync(0xffffffffu, static_cast<int64_t>(bounds.x), 0);
  const int64_t doc_hi = __shfl_sync(0xffffffffu, static_cast<int64_t>(bounds.y), 0);
  r.wg = DocRange{pos_lo, LLONG_MAX, LLONG_MIN, doc_hi};
}

// The key range of the key tile at key-list row kt0 of sample b (AttnKeyRange: the least and greatest position of its
// 128 rows), as the two halves of a FwdDocKeys; a global load issued a tile ahead of its softmax, as fwd_doc_keys.
__device__ __forceinline__ FwdDocKeys list_tile_keys(const WsWorkList& wl, int64_t b, int64_t kt0) {
  const longlong2 r = __ldg(reinterpret_cast<const longlong2*>(wl.words + wl.keys_at()) +
                            (b * wl.key_tiles + kt0 / kWgKeysPerTile));
  return FwdDocKeys{r.x, r.y, r.x, r.y};
}

}  // namespace
}  // namespace cuda
}  // namespace rt
