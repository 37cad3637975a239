// parallel.cp_scheme: auto falls back to the ring when only the ring fits (framework/plan/cp_scheme_memory.h).
#include "framework/plan/cp_scheme_memory.h"

#include <algorithm>
#include <cstdlib>

#include "framework/plan/plan.h"
#include "kernels/device_memory.h"

namespace rt {

bool cp_scheme_auto_falls_back(const CpSchemeMemory& m) {
  return m.limit > 0 && m.with_gather > m.limit && m.ring_only <= m.limit;
}

std::string cp_scheme_fallback_note(const CpSchemeMemory& m) {
  return "parallel.cp_scheme: auto runs the ring only: with the gather scheme's buffers (" +
         human_bytes(m.with_gather - m.ring_only) + ") a rank needs " + human_bytes(m.with_gather) + ", over its " +
         human_bytes(m.limit) + "; the ring alone needs " + human_bytes(m.ring_only) +
         ". Lower data.seq_len or train.batch_size for auto to choose per batch again, or set "
         "parallel.cp_scheme: ring to say so";
}

std::string resolve_cp_scheme_memory(Config& config, Device device, const PlanLimits& limits) {
  const bool applies = config.data.documents == "eot" && config.parallel.cp_scheme == CpSchemeSetting::automatic &&
                       config.parallel.ring() > 1 && limits.device_bytes > 0;
  if (!applies) return "";
  CpSchemeMemory m;
  m.limit = limits.device_bytes;
  m.with_gather = plan_point(config, device, limits).device_bytes();
  if (m.with_gather <= m.limit) return "";
  Config ring = config;
  ring.parallel.cp_scheme = CpSchemeSetting::ring;
  m.ring_only = plan_point(ring, device, limits).device_bytes();
  if (!cp_scheme_auto_falls_back(m)) return "";  // neither fits: the usual out-of-memory error names what to lower
  config.parallel.cp_scheme = CpSchemeSetting::ring;
  return cp_scheme_fallback_note(m);
}

PlanLimits trainer_device_limits(Device device) {
  PlanLimits limits;
  if (!device.is_cuda()) return limits;
  int local_ranks = 1;
  for (const char* key : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(key)) {
      local_ranks = std::max(1, std::atoi(v));
      break;
    }
  limits.ranks_per_node = local_ranks;
  const int per_gpu = std::max(1, local_ranks / std::max(1, cuda_device_count()));
  limits.device_bytes = double(device_total_bytes(device)) / per_gpu;
  return limits;
}

}  // namespace rt
