// parallel.cp_scheme: auto and memory (DESIGN.md "Document masks"). With documents on a ring of more than one rank,
// auto allocates the gather scheme's buffers (about (cp - 1) times the ring's K/V block, twice that for the f32
// dK/dV, and two exchange buffers) whether or not a batch then picks the gather. Where those buffers are what
// keeps a rank from fitting its device and the ring alone fits, the run takes the ring for every batch and says so
// once, instead of stopping on an out-of-memory error that the ring alone would not have. Train, eval and
// `ringtrain plan` resolve it alike, in the one resolve step (framework/plan/resolve.h).
#pragma once
#include <string>

#include "framework/config/config.h"
#include "framework/plan/plan_fit.h"

namespace rt {

// What one rank needs with auto's buffers and with the ring's alone, against its limit (bytes; PlanPoint::
// device_bytes, PlanLimits::device_bytes).
struct CpSchemeMemory {
  double with_gather = 0, ring_only = 0, limit = 0;
};

// The decision: true when auto's needs exceed the limit and the ring's do not (a limit <= 0 is unknown: false).
bool cp_scheme_auto_falls_back(const CpSchemeMemory& m);
// The start-up note of a fallback: both needs, the limit, and how to get auto back or silence it.
std::string cp_scheme_fallback_note(const CpSchemeMemory& m);

// Resolves it in place: when config has documents, a ring of more than one rank and cp_scheme auto, and the
// limit is known, measures both (plan_point, nothing allocated) and on a fallback sets parallel.cp_scheme to
// "ring" and returns the note; else "" and config unchanged. Deterministic: every rank of a job with the same
// limits decides alike.
std::string resolve_cp_scheme_memory(Config& config, Device device, const PlanLimits& limits);

// The limits the trainer judges a rank against: on CUDA the device's memory over the ranks sharing it (this
// node's ranks from Open MPI's or Slurm's environment, over the visible GPUs); on the CPU none (0: unknown).
PlanLimits trainer_device_limits(Device device);

}  // namespace rt
