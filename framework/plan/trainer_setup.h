// What train, eval and plan share: the device, the process grid, and the model (+ optimizer) built on an
// arena sized exactly by a first, measuring pass.
#pragma once
#include <memory>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/model/optimizer.h"
#include "kernels/arena.h"
#include "parallel/comm/process_grid.h"

namespace rt {

// device: cpu | cuda | auto (cuda when available). Under mpirun, rank -> GPU by the local rank.
Device resolve_device(const Config& config);
// The world communicator per parallel.comm (auto | mpi | nccl; see trainer_setup.cpp) for tensors on `device` (the
// resolve step's, framework/plan/resolve.h). Collective.
std::shared_ptr<Comm> make_world_comm(const Config& config, Device device);
std::shared_ptr<Comm> make_world_comm(const Config& config);  // resolve_device(config)'s
// The MPI world when launched with more than one rank (MPI initialised by main), else a local grid.
// Checks world size == dp * cp * tp. Without `device`: resolve_device(config) (for callers without the resolve step).
ProcessGrid make_process_grid(const Config& config, Device device);
ProcessGrid make_process_grid(const Config& config);

ModelOptions model_options(const Config& config, Device device);
// "" or the note that parallel.zero > 0 has nothing to shard on a dp x cp group of one rank (it runs as zero 0).
std::string zero_note(const Config& config);
// This rank's loader coordinates (dp, cp, layout).
LoaderRank loader_rank(const Config& config, const ProcessGrid& grid);
int64_t sequences_per_rank(const Config& config);
// train.mlp_chunk as the model resolves it for a rank's `tokens` tokens (resolve_mlp_chunk with this config's
// precision and checkpointing): what `plan` and the resolved table print.
int64_t resolved_mlp_chunk(const Config& config, int64_t tokens);
int64_t tokens_per_rank(const Config& config);

struct ModelSession {
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Model> model;
  std::unique_ptr<AdamW> optimizer;  // null when built without one (eval)
};
// Builds on Arena::measuring(device) (allocates nothing); the arena then holds the exact byte counts.
ModelSession measure_session(const Config& config, const ModelComms& comms, Device device, bool with_optimizer);
// train.offload_layers: auto resolved to the fewest layers with which this rank fits its GPU (the GPU's memory
// shared by the ranks on it); refuses, saying how much is needed, when the offloaded inputs of the node's ranks
// exceed the host's memory, or when the run is on the CPU.
Config resolve_offload(const Config& config, Device device);
// Resolves the offload, measures, then builds on a real arena of exactly that size. Weights are not initialised.
ModelSession build_session(const Config& config, const ModelComms& comms, Device device, bool with_optimizer);

}  // namespace rt
