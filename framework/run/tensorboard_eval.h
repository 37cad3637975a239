// The results of `ringtrain eval --task loss-by-position | needle` as TensorBoard event files
// (framework/run/tensorboard.h), read back from the .jsonl the task has just written, so the two always agree.
// Where: <run dir>/tensorboard/eval/<task>_<checkpoint name>/ (step_N, or <lineage>_step_N past the first lineage;
// one run in TensorBoard per task and checkpoint; a new evaluation of the same pair replaces its files), the run
// dir being the checkpoint's own
// (<run dir>/checkpoints/[<lineage>/]step_N), else train.run_dir when it exists.
//   loss-by-position: tag loss_by_position/<by> (window | document) at step = the bucket's first position, the mean
//                     loss; loss_by_position/<by>_targets the bucket's target count;
//   needle:           per kind and case length, tags needle/<kind>_len<L>/{accuracy, exact, mean_logprob} at
//                     step = the depth in percent (round(100 depth)), each the mean over the cases there.
#pragma once
#include <string>

#include "framework/config/config.h"

namespace rt {

// The eval events' directory for `task` on `checkpoint`, or "" when neither the checkpoint's path nor
// train.run_dir names an existing run directory.
std::string eval_events_dir(const Config& config, const std::string& task, const std::string& checkpoint);
// Writes the events (log.tensorboard on and protobuf built in) and says on stderr where they went or why none were
// (nothing when log.tensorboard is off). Never throws: a failure is a warning, the results being in the .jsonl
// already. Rank 0 only, after the results are written.
void write_eval_events(const Config& config, const std::string& task, const std::string& results_jsonl,
                       const std::string& checkpoint);

}  // namespace rt
