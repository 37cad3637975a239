// The run directory (train.run_dir): config.yaml (the resolved config), the metrics JSONL and
// checkpoints/. Only training creates it, and only on rank 0; loading or validating a config never does.
#pragma once
#include <string>

#include "framework/config.h"

namespace rt {

// Creates train.run_dir (and parents) and writes the resolved config to run_dir/config.yaml
// (written to a temporary file, then renamed). Returns the run directory. Throws rt::Error naming it.
std::string prepare_run_dir(const Config& config);
// run_dir/<log.metrics_file>
std::string metrics_path(const Config& config);
// run_dir/config.yaml
std::string resolved_config_path(const Config& config);

}  // namespace rt
