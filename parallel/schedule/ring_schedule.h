// The ring schedule (DESIGN.md "Sequence layouts and the ring schedule"): at step t rank r holds the K/V block
// of rank ring_source(r, t, cp), and ring_block_plan says which part of that block its queries see.
// Shared by RingAttention and the one-GPU ring-step benchmark (bench/ring_steps.cu).
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "parallel/schedule/layout.h"

namespace rt {

// What one ring step computes: skip entirely, or call the kernel with `mask`.
struct RingBlockPlan {
  bool skip = false;
  AttnMask mask;
};

// Queries are rank r's n tokens; keys are rank s's n tokens (both in layout order). Exact for every layout.
RingBlockPlan ring_block_plan(Layout layout, bool causal, int r, int s, int64_t n);

// The rank whose K/V block rank `rank` holds at ring step `step` (blocks travel to rank + 1).
inline int ring_source(int rank, int step, int size) { return ((rank - step) % size + size) % size; }

}  // namespace rt
