// Entry points the `ringtrain` command calls (framework/main.cpp). Each returns the process exit code.
#pragma once
#include <string>

#include "framework/config.h"
#include "kernels/tensor.h"

namespace rt {

// Trains per config: builds the grid from the MPI world, the model, the loader; logs, evaluates,
// checkpoints (also on SIGUSR1/SIGTERM/SIGINT, then returns 128+N) and writes run_dir/{config.yaml,
// metrics.jsonl, run.json}. Returns 0, 3 (divergence) or 128+N; errors agreed by every rank throw AgreedError.
int train_main(const Config& config);
// Loads the weights of `checkpoint` (a checkpoint directory or a .safetensors file), takes the model fields the
// config does not set from its metadata, and prints the mean per-token loss over the config's eval data, on a
// grid of `world_size` processes (the config's, or one that fits; printed). dump_logits_file: also writes the
// first eval batch's logits and tokens as .npy (framework/dump_logits.h).
int eval_main(const Config& config, const std::string& checkpoint, int world_size = 1,
              const std::string& dump_logits_file = "");
// Sets config.parallel to a grid of world_size processes when dp*cp*tp differs (cp, then tp, then dp take them
// all). Returns the sentence saying so, or "" when the grid already fits. Throws RunError when none fits.
std::string fit_grid_to_world(Config& config, int world_size);
// Prints parameter count, FLOPs per step, predicted peak memory per rank and what dominates it. No GPU needed.
// json: print one JSON object instead (params, flops_per_step, peak_bytes_per_rank, fits, device_bytes, ...),
// read by launch/sweep.sh.
struct PlanArgs {
  bool json = false;
  bool max_seq_len = false;       // search the longest data.seq_len that fits
  double device_memory_gib = 0;   // per GPU (or the host, on the CPU); 0: the visible device's
  double host_memory_gib = 0;     // per node; 0: this host's
  int ranks_per_node = 0;         // 0: min(world, 8)
  std::string doc_lengths;        // a document-length file: visible-pair attention FLOPs and imbalance per layout
};
int plan_main(const Config& config, const PlanArgs& args);
// Device memory a rank uses outside the arena, added to `ringtrain plan`'s total: 2 GiB on CUDA (CUDA context,
// cuBLASLt workspace, allocator rounding; measured 0.55-2 GiB on an H200), 0 on CPU.
double non_arena_allowance_bytes(Device device);

}  // namespace rt
