// What a training start does with its run directory (framework/run/run_dir.h): fresh, continue a lineage, or
// branch; and whether the config may resume the chosen checkpoint.
//   checkpoint.resume ""     fresh start. Refused when run_dir holds checkpoints, unless train.overwrite=true
//                            (which deletes them). An earlier metrics file is moved aside, never truncated.
//   checkpoint.resume auto   the newest checkpoint of the current lineage (run.json); when that lineage has
//                            none yet, the checkpoint it started from; no checkpoint at all: a fresh start.
//   checkpoint.resume <dir>  the newest of the current lineage continues it; any other starts a branch, a new
//                            lineage <lineage>.b<step> under checkpoints/.
// Every choice comes with the sentence that explains it (printed by rank 0).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "framework/config/config.h"

namespace rt {

struct RunPlan {
  std::string resume_from;          // "" = fresh
  std::string lineage;              // saves go to run_dir/checkpoints/<lineage>
  std::string parent;               // the checkpoint the lineage started from ("" = fresh)
  bool write_record = false;        // run.json changes (a new lineage)
  std::vector<std::string> wipe;    // train.overwrite: checkpoint directories to delete
  std::string why;                  // one sentence for the log
};

// Read-only: decides from the run directory and the config. Throws RunError (exit 2) with the fix.
RunPlan plan_run(const Config& config);

// For a resume: fills model fields the config does not set from the checkpoint's recorded config, refuses
// changes to model.* and data.* (each field with both values), and returns the allowed changes
// ("train.steps: 20 -> 40") to print. Re-validates `config`. Throws RunError (exit 2).
std::vector<std::string> reconcile_resume_config(Config& config, const std::string& checkpoint_dir, int world_size);

// The resolved config as dotted path -> text (stored in state.json).
std::map<std::string, std::string> config_as_map(const Config& config);

}  // namespace rt
