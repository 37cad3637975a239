#include "framework/run/resume_plan.h"

#include <filesystem>
#include <sstream>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config_schema.h"
#include "framework/checkpoint/model_source.h"
#include "framework/run/run_dir.h"
#include "framework/base/run_errors.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

constexpr const char* kFirstLineage = "main";

bool same_dir(const std::string& a, const std::string& b) {
  std::error_code ec;
  return !a.empty() && !b.empty() && fs::equivalent(a, b, ec);
}

std::string step_of_dir(const std::string& dir) { return fs::path(dir).filename().string(); }

}  // namespace

std::map<std::string, std::string> config_as_map(const Config& config) {
  std::map<std::string, std::string> out;
  for (const FieldSpec& f : config_fields()) out[f.path()] = field_text(config, f);
  return out;
}

RunPlan plan_run(const Config& config) {
  const std::string& run_dir = config.train.run_dir;
  const std::string& resume = config.checkpoint.resume;
  const std::optional<RunRecord> record = read_run_record(run_dir);
  const std::vector<std::string> existing = all_checkpoints(run_dir);
  RunPlan plan;

  if (resume.empty()) {
    plan.lineage = kFirstLineage, plan.write_record = true;
    if (existing.empty()) {
      plan.why = "fresh start: lineage 'main'";
      return plan;
    }
    if (!config.train.overwrite)
      throw RunError(kExitUsage,
                     "train.run_dir='" + run_dir + "' already holds " + std::to_string(existing.size()) +
                         " checkpoint(s) of an earlier run (newest written: " + existing.back() +
                         "). A fresh run would mix with them. Continue that run with --set checkpoint.resume=auto, "
                         "branch from one with --set checkpoint.resume=<its directory>, choose another "
                         "train.run_dir, or delete them and start over with --set train.overwrite=true");
    plan.wipe = existing;
    plan.why = "fresh start (train.overwrite=true): deleting the " + std::to_string(existing.size()) +
               " earlier checkpoint(s); lineage 'main'";
    return plan;
  }

  if (resume == "auto") {
    if (record) {
      plan.lineage = record->lineage, plan.parent = record->parent;
      const std::string newest = latest_checkpoint(lineage_dir(run_dir, record->lineage));
      if (!newest.empty()) {
        plan.resume_from = newest;
        plan.why = "resume: auto -> " + newest + ": the newest checkpoint of lineage '" + record->lineage +
                   "', the current one (run.json)";
      } else if (!record->parent.empty() && fs::is_directory(record->parent)) {
        plan.resume_from = record->parent;
        plan.why = "resume: auto -> " + record->parent + ": lineage '" + record->lineage +
                   "' (run.json) has no checkpoint yet, so it starts again from its parent";
      } else {
        plan.why = "resume: auto found no checkpoint of lineage '" + record->lineage + "': fresh start";
      }
      return plan;
    }
    plan.lineage = kFirstLineage, plan.write_record = true;
    const std::string legacy = latest_checkpoint((fs::path(run_dir) / "checkpoints").string());
    if (!legacy.empty()) {
      plan.resume_from = plan.parent = legacy;
      plan.why = "resume: auto -> " + legacy + ": the newest checkpoint of a run_dir from before lineages; "
                 "new saves go to lineage 'main'";
    } else {
      plan.why = "resume: auto found no checkpoint in train.run_dir='" + run_dir + "': fresh start, lineage 'main'";
    }
    return plan;
  }

  plan.resume_from = resume;
  const TrainState st = read_checkpoint_state(resume);
  if (record && same_dir(resume, latest_checkpoint(lineage_dir(run_dir, record->lineage)))) {
    plan.lineage = record->lineage, plan.parent = record->parent;
    plan.why = "resume: " + resume + " is the newest checkpoint of the current lineage '" + record->lineage +
               "': continuing it";
    return plan;
  }
  plan.write_record = true, plan.parent = resume;
  if (!record && existing.empty()) {
    plan.lineage = kFirstLineage;
    plan.why = "resume: " + resume + " into a new run_dir: lineage 'main' starts from it";
    return plan;
  }
  plan.lineage = branch_lineage_name(run_dir, st.lineage.empty() ? kFirstLineage : st.lineage, st.step);
  plan.why = "resume: " + resume + " (" + step_of_dir(resume) + ") is not the newest checkpoint of the current "
             "lineage" + (record ? " '" + record->lineage + "'" : std::string()) + ": a branch, new lineage '" +
             plan.lineage + "' saved under " + lineage_dir(run_dir, plan.lineage) +
             " (the other lineages' checkpoints are kept)";
  return plan;
}

std::vector<std::string> reconcile_resume_config(Config& config, const std::string& checkpoint_dir, int world_size) {
  const TrainState st = read_checkpoint_state(checkpoint_dir);
  std::vector<std::string> changes;
  if (st.config.empty()) return changes;  // an older checkpoint: only the model hash is checked
  std::map<std::string, std::string> model_meta;
  for (const auto& [path, text] : st.config)
    if (path.rfind("model.", 0) == 0) model_meta[path.substr(6)] = text;
  try {
    apply_model_from_source(config, model_meta, "checkpoint", checkpoint_dir);
  } catch (const Error& e) {
    throw RunError(kExitUsage, std::string("resume refused: ") + e.what());
  }
  std::vector<std::string> refused;
  for (const auto& [path, now] : config_as_map(config)) {
    auto it = st.config.find(path);
    if (it == st.config.end() || it->second == now || path == "checkpoint.resume") continue;
    const bool frozen = path.rfind("model.", 0) == 0 || path.rfind("data.", 0) == 0;
    (frozen ? refused : changes).push_back(path + ": " + it->second + " -> " + now);
  }
  if (!refused.empty()) {
    std::ostringstream os;
    os << "resume refused: checkpoint " << checkpoint_dir << " was trained with another model or data; "
       << "these fields differ (checkpoint -> config):";
    for (const std::string& r : refused) os << "\n  - " << r;
    os << "\nSet them back to the checkpoint's values. Changes allowed on resume: train.steps, optim.*, "
          "checkpoint.*, log.*, parallel.* (and the other train.* knobs)";
    throw RunError(kExitUsage, os.str());
  }
  validate_config(config, world_size);
  return changes;
}

}  // namespace rt
