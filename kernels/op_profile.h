// Per-op GPU time of a window of work (for example one training step): CUDA events around every op that
// kernels/ops.cpp dispatches to the CUDA backend, summed by op name. It is the profile that says where a step's
// time goes (attention forward, attention backward, GEMMs, the rest). Off unless a window is open; while off
// an op pays one relaxed atomic load. Host ops and communication are not dispatched through kernels/ops.cpp
// and are not timed: a step's time minus the ops' sum is that work plus the GPU's idle time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rt {

struct OpTime {
  std::string name;  // the op, as kernels/ops.h names it (gemm, attn_fwd_block, ...)
  int64_t calls = 0;
  double ms = 0;     // GPU time summed over the calls
};

// Opens a window: from now on CUDA ops are timed (a window already open is cleared). Without CUDA there is
// nothing to time and the window stays empty.
void op_profile_begin();
// Closes the window: waits for the timed work to finish and returns the per-op totals, the longest first.
std::vector<OpTime> op_profile_end();
bool op_profile_active();

}  // namespace rt
