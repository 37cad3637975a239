// fwd v5's list mode: the consumers' epilogue, with the split merge (kernels/attn_work_list.h "Splits"; bench/NOTES.md
// "Split merge"). Called once per consumer thread after the key loop (attn_fwd_sm90ws_consumer.inc), never inside it:
//   * an unsplit task (parts 1): store_final_rows, as before splits existed;
//   * a part of a split task: each warp stores its 16 rows' unnormalized state (O f32, m in log2 units, l summed over
//     the quad) into split_state[merge_slot, h, row], the lanes fence and meet at the warp's barrier, then lane 0
//     fences and adds 1 (release) to the counter of (the tile's first slot, h, the warp's 16-row group). The warp that
//     reads parts - 1 from its add is the last of the group's parts: it fences (acquire), reads every part's state of
//     its rows from L2
//     (__ldcg) in part order 0, 1, ..., merges them with attn_state_merge's math (m' = max, rescale by exp2(m - m'),
//     a part whose m is -inf adds nothing), writes out and lse (store_final_rows) and resets the counter to 0, so the
//     next call needs no memset. The merge reads stored states in part order, never registers in arrival order, so
//     the bits do not depend on which part lands last.
// Per warp, not per CTA: the 8 consumer warps of a part's CTA each signal and merge their own rows, with no block
// barrier among the consumers (the producer warpgroup has left by then).
// The task's part, parts and merge slot are read again from the list here (the unit's task index recomputed from
// its unit index), so that nothing of them is live across the key loop. Included by attn_fwd_sm90ws_kernel.cuh; keep
// C++17.
#pragma once
#include <cstdint>

#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list.cuh"
#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgRowsPerCta, quad_sum, store_final_rows

// The list task of unit d (work_list_unit's mapping of its d, for the host's T and the head window).
__device__ __forceinline__ int work_list_task_of(const AttnFwdParams& p, const WsWorkList& wl, int window, int64_t d) {
  const int64_t T = wl.tasks;
  const int64_t w = d / (int64_t(window) * T), rem = d % (int64_t(window) * T);
  const int64_t width = min(int64_t(window), p.H - w * window);
  return int(rem / width);
}

// The epilogue of one consumer thread: rows row0 and row0 + 8 of the tile (absolute query rows; lrow0 = row0 - q0,
// the tile-local row), quad thread t, the state of its two rows (m_run, per-thread partial l_run, o); d: the unit
// (blockIdx.x, or the persistent form's unit).
template <int D>
__device__ __forceinline__ void work_list_epilogue(const AttnFwdParams& p, const WsWorkList& wl, int window, int64_t b,
                                                   int64_t h, int64_t q0, int lrow0, int t, float (&m_run)[2],
                                                   float (&l_run)[2], float (&o)[D / 2], int64_t d) {
  const int32_t* task = wl.words + 4 + 4 * int64_t(work_list_task_of(p, wl, window, d));
  const int32_t w1 = __ldg(task + 1), w3 = __ldg(task + 3);
  const int part = int8_t((w1 >> 16) & 0xff), parts = int8_t((w1 >> 24) & 0xff);
  if (parts <= 1) {
    store_final_rows<D>(p, q0 + lrow0, b, h, t, m_run, l_run, o);
    return;
  }
  constexpr int kRowFloats = D + 2;  // a state row: O (D), m, l
  const int slot = int16_t((w3 >> 16) & 0xffff), s0 = slot - part;
  const int lane = int(threadIdx.x) % 32;
  // This part's state rows, then the release.
  {
    float* base = wl.split_state + (int64_t(slot) * p.H + h) * kWgRowsPerCta * kRowFloats;  // (128, D + 2)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float* row = base + (lrow0 + 8 * r) * kRowFloats;
      const float lx = quad_sum(l_run[r]);
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt)
        *reinterpret_cast<float2*>(row + nt * 8 + 2 * t) = make_float2(o[nt * 4 + 2 * r], o[nt * 4 + 2 * r + 1]);
      if (t == 0) *reinterpret_cast<float2*>(row + D) = make_float2(m_run[r], lx);
    }
  }
  // Release: each lane's stores, the warp's barrier (which orders them before lane 0's next operations), lane 0's
  // fence, then its add.
  __threadfence();
  __syncwarp();
  int* count = wl.split_count + (int64_t(s0) * p.H + h) * kAttnWorkRowGroups + lrow0 / kAttnWorkRowGroupRows;
  int landed = 0;
  if (lane == 0) {
    __threadfence();
    landed = atomicAdd(count, 1);
    __threadfence();  // acquire, for the merge below
  }
  landed = __shfl_sync(0xffffffffu, landed, 0);
  if (landed != parts - 1) return;  // another part's warp merges these rows
  __syncwarp();     // lane 0's acquire before every lane's reads
  __threadfence();
  // The merge, in part order.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float m = -INFINITY, l = 0.f;
    for (int k = 0; k < parts; ++k) {
      const float* row =
          wl.split_state + ((int64_t(s0 + k) * p.H + h) * kWgRowsPerCta + lrow0 + 8 * r) * kRowFloats;
      const float2 ml = __ldcg(reinterpret_cast<const float2*>(row + D));
      if (ml.x == -INFINITY) continue;  // the part saw no key of this row
      const float mx = fmaxf(m, ml.x);
      const float c = m == -INFINITY ? 0.f : exp2f(m - mx), co = exp2f(ml.x - mx);
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        const float2 v = __ldcg(reinterpret_cast<const float2*>(row + nt * 8 + 2 * t));
        float& o0 = o[nt * 4 + 2 * r];
        float& o1 = o[nt * 4 + 2 * r + 1];
        o0 = (m == -INFINITY ? 0.f : o0 * c) + v.x * co;
        o1 = (m == -INFINITY ? 0.f : o1 * c) + v.y * co;
      }
      l = (m == -INFINITY ? 0.f : l * c) + ml.y * co;
      m = mx;
    }
    if (m == -INFINITY) {  // no part saw a key of this row: out 0, lse -inf
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) o[nt * 4 + 2 * r] = o[nt * 4 + 2 * r + 1] = 0.f;
    }
    m_run[r] = m;
    l_run[r] = t == 0 ? l : 0.f;  // store_final_rows sums l over the quad
  }
  store_final_rows<D>(p, q0 + lrow0, b, h, t, m_run, l_run, o);
  if (lane == 0) *count = 0;  // every part of the group has landed: the next call starts from 0
}

}  // namespace
}  // namespace cuda
}  // namespace rt
