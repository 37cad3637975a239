// `ringtrain eval` (framework/main.cpp) and the grid fitting eval and generate share. Returns the exit code.
#pragma once
#include <string>

#include "framework/config/config.h"
#include "framework/eval/eval_tasks.h"

namespace rt {

// Loads the weights of `checkpoint` (a checkpoint directory or a .safetensors file), takes the model fields the
// config does not set from its metadata, and prints the mean per-token loss over the config's eval data, on a
// grid of `world_size` processes (the config's, or one that fits; printed). dump_logits_file: also writes the
// first eval batch's logits and tokens as .npy (framework/eval/dump_logits.h). task: loss (default),
// loss-by-position or needle (framework/eval/eval_tasks.h).
int eval_main(const Config& config, const std::string& checkpoint, int world_size = 1,
              const std::string& dump_logits_file = "", const EvalTaskArgs& task = {});
// Sets config.parallel to a grid of world_size processes when dp*cp*tp differs (cp, then tp, then dp take them
// all). Returns the sentence saying so, or "" when the grid already fits. Throws RunError when none fits.
std::string fit_grid_to_world(Config& config, int world_size);

}  // namespace rt
