// `ringtrain train` (framework/main.cpp). Returns the process exit code.
#pragma once
#include <string>

#include "framework/config/config.h"
#include "kernels/tensor.h"

namespace rt {

// Trains per config: builds the grid from the MPI world, the model, the loader; logs, evaluates,
// checkpoints (also on SIGUSR1/SIGTERM/SIGINT, then returns 128+N) and writes run_dir/{config.yaml,
// metrics.jsonl, run.json}. Returns 0, 3 (divergence) or 128+N; errors agreed by every rank throw AgreedError.
int train_main(const Config& config);

}  // namespace rt
