// The per-step masks of the ring schedule (parallel/schedule/ring_schedule.h).
#include "parallel/schedule/ring_schedule.h"

#include "kernels/tensor.h"

namespace rt {

RingBlockPlan ring_block_plan(Layout layout, bool causal, int r, int s, int64_t n) {
  RingBlockPlan plan;
  if (!causal) return plan;  // every query sees every key
  switch (layout) {
    case Layout::contiguous:
      // Rank r holds [r*n, (r+1)*n). Blocks from later ranks are entirely in the future.
      if (s > r) plan.skip = true;
      if (s == r) plan.mask.causal = true;  // offsets r*n on both sides cancel
      break;
    case Layout::zigzag: {
      // Local order [chunk r | chunk 2cp-1-r] is monotone in global position, so the local causal mask is
      // exact on the diagonal. Off-diagonal, exactly half the (query, key) pairs are visible, unmasked.
      const int64_t h = n / 2;
      if (s == r) {
        plan.mask.causal = true;
      } else if (s < r) {
        plan.mask.k_end = h;  // all queries x the first chunk of the keys
      } else {
        plan.mask.q_begin = h;  // the second chunk of the queries x all keys
      }
      break;
    }
    case Layout::balanced:
      RT_CHECK(false, "ring attention: layout balanced runs on the document mask; call set_documents first");
      break;
    case Layout::striped:
      // Query i sits at r + i*cp, key j at s + j*cp: visible iff j <= i (s <= r) or j < i (s > r).
      plan.mask.causal = true;
      plan.mask.q_offset = 0;
      plan.mask.k_offset = s > r ? 1 : 0;
      break;
  }
  return plan;
}

}  // namespace rt
