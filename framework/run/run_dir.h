// The run directory (train.run_dir), owned by one run at a time:
//   .lock            flock'ed by rank 0 for the whole run; holds "pid host start-time" of the holder
//   config.yaml      the resolved config of the latest start
//   run.json         {"lineage": the current lineage, "parent": the checkpoint it started from ("" = fresh)}
//   metrics.jsonl    one line per logged step, each step once (resume moves later lines to a side file)
//   checkpoints/<lineage>/step_N/   the checkpoints of each lineage
// A lineage is one unbroken sequence of saves. The first is "main"; resuming from a checkpoint that is not the
// newest of the current lineage (a branch) starts "<lineage>.b<step>", so the branches never overwrite or
// rotate away each other's checkpoints. Only training creates a run directory, and only on rank 0.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "framework/config/config.h"

namespace rt {

// Creates train.run_dir (and parents) and writes the resolved config to run_dir/config.yaml (a temporary
// file, then renamed). Returns the run directory. Throws RunError (exit 2) naming train.run_dir and the reason.
std::string prepare_run_dir(const Config& config);
// run_dir/<log.metrics_file>
std::string metrics_path(const Config& config);
// run_dir/config.yaml
std::string resolved_config_path(const Config& config);

// Holds run_dir/.lock (flock, exclusive) until destroyed. Creates run_dir. Throws RunError (exit 2) naming the
// holder's pid and host when another run holds it. flock is advisory and per host on some network filesystems.
class RunDirLock {
 public:
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

struct RunRecord {
  std::string lineage;
  std::string parent;
};
std::optional<RunRecord> read_run_record(const std::string& run_dir);
void write_run_record(const std::string& run_dir, const RunRecord& record);  // durable (tmp + rename)

// run_dir/checkpoints/<lineage>
std::string lineage_dir(const std::string& run_dir, const std::string& lineage);
// Every complete checkpoint of every lineage of run_dir (and any from before lineages, in checkpoints/).
std::vector<std::string> all_checkpoints(const std::string& run_dir);
// A lineage name not yet used in run_dir for a branch of `base` at `step`: base.b<step>, then base.b<step>-2 ...
std::string branch_lineage_name(const std::string& run_dir, const std::string& base, int64_t step);

// Keeps the lines of `path` whose "step" is <= step (lines without one stay) and moves the others, in order,
// to a new side file `path.after-step<step>.<k>`, which it returns ("" when nothing moved). Atomic rename.
std::string move_metrics_after(const std::string& path, int64_t step);
// Moves a non-empty `path` to `path.previous.<k>` (a fresh run never truncates an earlier one's metrics).
// Returns the new name, or "".
std::string move_metrics_aside(const std::string& path);

}  // namespace rt
