// Entry points the `ringtrain` command calls (framework/main.cpp). Each returns the process exit code.
#pragma once
#include <string>

#include "framework/config.h"
#include "kernels/tensor.h"

namespace rt {

// Trains per config: builds the grid from the MPI world, the model, the loader; logs, evaluates,
// checkpoints (also on SIGTERM/SIGINT) and writes run_dir/{config.yaml, metrics.jsonl}.
int train_main(const Config& config);
// Loads `checkpoint_dir` (any grid) and prints the mean per-token loss over the config's eval data.
// dump_logits_file: also writes the first eval batch's logits and tokens as .npy (framework/dump_logits.h).
int eval_main(const Config& config, const std::string& checkpoint_dir, const std::string& dump_logits_file = "");
// Prints parameter count, FLOPs per step, predicted peak memory per rank and what dominates it. No GPU needed.
// json: print one JSON object instead (params, flops_per_step, peak_bytes_per_rank, fits, device_bytes, ...),
// read by launch/sweep.sh.
int plan_main(const Config& config, bool json = false);
// Device memory a rank uses outside the arena, added to `ringtrain plan`'s total: 2 GiB on CUDA (CUDA context,
// cuBLASLt workspace, allocator rounding; measured 0.55-2 GiB on an H200), 0 on CPU.
double non_arena_allowance_bytes(Device device);

}  // namespace rt
