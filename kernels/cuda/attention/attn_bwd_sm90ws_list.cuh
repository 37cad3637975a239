// bwd v5's list mode (kList; attn_bwd_work_list.cu runs it): the units come from a backward work list
// (AttnBwdWorkList, kernels/attn_work_list.h) instead of the grid, the per-call summaries and spans. Unit u is
// (task n, K/V head hk) in windows of K/V heads (bwd_item over a grid of n_kt = T tasks and n_bh = Hkv "pairs": within
// a window the tasks in list order, heaviest first, the window's heads fastest); its key tile is the task's, its
// iterations are (query head of hk's group, 64-row half of each 128-row query tile of the task's segments, clipped at
// Nq), heads outer and query tiles ascending, as bwd v5's over its span. The producer counts the task's 64-row stages
// and publishes the count in the unit ring's span slot (span.x), so the other roles read it there; each role walks the
// segments itself (BwdListCursor); the consumers take each stage's first query row from the docs warp's stage info.
// The docs warp and the consumers take the key tile's position ranges from its 128 positions (list_key_range), not
// from the summaries. Included by attn_bwd_sm90ws_docs.cuh; keep C++17.
#pragma once
#include <climits>
#include <cstdint>

#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_bwd_sm90ws_units.cuh"
#include "kernels/cuda/attention/attn_doc_mask.cuh"

namespace rt {
namespace cuda {
namespace wgbwd {

// The backward list's device words as the kernel reads them (kList only; an empty one elsewhere).
struct BwdWorkListDev {
  const int32_t* words = nullptr;  // (n_words) i32, 16-byte aligned: attn_work_list_words(AttnBwdWorkList)
  int n_words = 0;
  int B = 0;          // samples of the call (a task's sample is below it)
  int q_tiles = 0;    // the call's 128-row query tiles, ceil(Nq / 128)
  int key_tiles = 0;  // the key list's 128-row tiles (a task's k_row / 128 is below it)
};

// The list's task count, its header checked against the words' length (a bad list stops the kernel: trap).
__device__ __forceinline__ int bwd_list_tasks(const BwdWorkListDev& wl) {
  const int T = wl.words[0], S = wl.words[1];
  if (wl.n_words < 4 || wl.words[2] != kAttnBwdWorkListTag || T < 0 || S < 0 ||
      4 + 4 * int64_t(T) + 2 * int64_t(S) > wl.n_words)
    __trap();
  return T;
}

struct BwdListTask {
  int k_row, b, first_seg, segs;
};

// Task n (AttnBwdTask's 16 bytes as 4 i32: k_row; sample | part << 16 | parts << 24; first_seg; segs | merge_slot
// << 16), checked: an unsplit task of a key tile of the call with its segments inside the list.
__device__ __forceinline__ BwdListTask bwd_list_task(const BwdWorkListDev& wl, int n) {
  const int4 w = *reinterpret_cast<const int4*>(wl.words + 4 + 4 * int64_t(n));
  const int b = int(int16_t(w.y & 0xffff)), part = int(int8_t((w.y >> 16) & 0xff)), parts = int(int8_t(w.y >> 24));
  const int segs = int(int16_t(w.w & 0xffff)), merge_slot = int(int16_t(uint32_t(w.w) >> 16));
  const int S = wl.words[1];
  if (w.x < 0 || w.x % kBc != 0 || w.x / kBc >= wl.key_tiles || b < 0 || b >= wl.B || part != 0 || parts != 1 ||
      merge_slot != -1 || segs < 0 || w.z < 0 || int64_t(w.z) + segs > S)
    __trap();
  return BwdListTask{w.x, b, w.z, segs};
}

// Segment g of the list: {first query tile, tiles} (AttnQuerySeg's 8 bytes: first_tile; tiles | source << 16),
// checked against the call's query tiles. `segs` = the words from the segments' section on.
__device__ __forceinline__ int2 bwd_list_seg(const int2* segs, int g, int q_tiles) {
  const int2 s = segs[g];
  const int first = s.x, tiles = int(int16_t(s.y & 0xffff));
  if (first < 0 || tiles < 1 || first + tiles > q_tiles) __trap();
  return make_int2(first, tiles);
}

__device__ __forceinline__ const int2* bwd_list_segs(const BwdWorkListDev& wl, int T) {
  return reinterpret_cast<const int2*>(wl.words + 4 + 4 * int64_t(T));
}

// The 64-row stages of unit u's task: per segment the rows [128 first, 128 (first + tiles)) clipped at q_end, in 64-row
// tiles (the producer's count, published as span.x).
__device__ __forceinline__ int bwd_list_stages(const AttnBwdParams& p, const BwdWorkListDev& wl,
                                               const BwdV5Grid& grid, int64_t u) {
  const BwdItem it = bwd_item(grid, p.Hkv, u);
  const BwdListTask task = bwd_list_task(wl, int(it.kt));
  const int2* segs = bwd_list_segs(wl, int(grid.n_kt));
  int stages = 0;
  for (int g = task.first_seg; g < task.first_seg + task.segs; ++g) {
    const int2 s = bwd_list_seg(segs, g, wl.q_tiles);
    const int64_t lo = int64_t(s.x) * kAttnWorkTileRows, hi = min(p.q_end, int64_t(s.x + s.y) * kAttnWorkTileRows);
    stages += int((hi - lo + kBr - 1) / kBr);
  }
  return stages;
}

// Unit u as every role decodes it (grid: n_kt = T, n_bh = Hkv, units = T x Hkv; `stages` from the ring's span.x).
// In list mode q_first and n_qt name the task's segments [q_first, q_first + n_qt) (there is no contiguous query
// span); it_begin is 0, n_iter = group x stages, kt the key tile's index in the list.
__device__ __forceinline__ BwdUnit bwd_list_unit(const AttnBwdParams& p, const BwdWorkListDev& wl,
                                                 const BwdV5Grid& grid, int64_t u, int stages) {
  const BwdItem it = bwd_item(grid, p.Hkv, u);
  const BwdListTask task = bwd_list_task(wl, int(it.kt));
  BwdUnit x;
  x.piece = false;
  x.kt = task.k_row / kBc;
  x.hk = int(it.hk);
  x.b = task.b;
  x.k0 = task.k_row;
  x.q_first = task.first_seg;
  x.n_qt = task.segs;
  x.it_begin = 0;
  x.n_iter = int(p.group) * stages;
  return x;
}

// A unit's iterations in order: query head `head` of the group (outer), then each 64-row tile q0 of each segment.
// begin() only for a unit with iterations; next() past the last one is harmless (it reloads the first segment).
struct BwdListCursor {
  const int2* segs;
  int seg, seg_first, seg_end, q_tiles;
  int q0, q_stop;  // the stage's first query row; the current segment's row end (clipped at q_end)
  int head;        // the query head within the K/V head's group
  int64_t q_end;
  __device__ __forceinline__ void load() {
    const int2 s = bwd_list_seg(segs, seg, q_tiles);
    q0 = s.x * int(kAttnWorkTileRows);
    q_stop = int(min(q_end, int64_t(s.x + s.y) * kAttnWorkTileRows));
  }
  __device__ __forceinline__ void begin(const AttnBwdParams& p, const BwdWorkListDev& wl, const BwdV5Grid& grid,
                                        const BwdUnit& w) {
    segs = bwd_list_segs(wl, int(grid.n_kt));
    seg = seg_first = w.q_first;
    seg_end = w.q_first + w.n_qt;
    q_tiles = wl.q_tiles;
    q_end = p.q_end;
    head = 0;
    load();
  }
  __device__ __forceinline__ void next() {
    q0 += kBr;
    if (q0 < q_stop) return;
    if (++seg == seg_end) {
      seg = seg_first;
      ++head;
    }
    load();
  }
};

// The least and greatest position of keys [k0 + 64 half, k0 + 64 half + 64) of the unit's sample below k_end (what
// doc_k_range gives from the summaries: LLONG_MAX, LLONG_MIN for none), by one warp from the positions.
__device__ __forceinline__ DocRange list_key_range(const AttnBwdParams& p, const BwdUnit& w, int half, int lane) {
  const int64_t* k_pos = p.docs.k_pos + int64_t(w.b) * p.docs.k_stride;
  int64_t lo = LLONG_MAX, hi = LLONG_MIN;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = int64_t(w.k0) + 64 * half + 32 * i + lane;
    if (row < p.k_end) {
      const int64_t kp = k_pos[row];
      lo = min(lo, kp);
      hi = max(hi, kp);
    }
  }
  warp_min_max(lo, hi);
  return DocRange{lo, hi, 0, 0};
}

// The least position of the unit's keys below k_end (min of list_key_range's two halves), by one warp: each lane's
// four loads issued together, one reduction.
__device__ __forceinline__ int64_t list_key_base(const AttnBwdParams& p, const BwdUnit& w, int lane) {
  const int64_t* k_pos = p.docs.k_pos + int64_t(w.b) * p.docs.k_stride;
  int64_t lo = LLONG_MAX;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = int64_t(w.k0) + 32 * i + lane;
    if (row < p.k_end) lo = min(lo, k_pos[row]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
  return lo;
}

}  // namespace wgbwd
}  // namespace cuda
}  // namespace rt
