// framework/eval/eval_outputs.h
#include "framework/eval/eval_outputs.h"

#include <filesystem>
#include <set>

#include "framework/base/output_files.h"
#include "framework/base/run_errors.h"
#include "framework/eval/dump_logits.h"
#include "framework/eval/eval_ruler.h"

namespace rt {

std::vector<std::pair<std::string, std::string>> eval_output_paths(const EvalTaskArgs& task,
                                                                   const std::string& dump_logits_file) {
  std::vector<std::pair<std::string, std::string>> paths;
  if (!task.out.empty()) {
    paths.push_back({"--out", task.out});
    if (task.task == "loss-by-position") paths.push_back({"--out", position_losses_csv_path(task.out)});
    if (task.task == "ruler") {
      paths.push_back({"--out", ruler_table_md_path(task.out)});
      paths.push_back({"--out", ruler_table_csv_path(task.out)});
    }
  }
  if (!dump_logits_file.empty()) {
    paths.push_back({"--dump-logits", dump_logits_file});
    paths.push_back({"--dump-logits", dump_logits_tokens_path(dump_logits_file)});
  }
  return paths;
}

void check_eval_request(const Config& config, const EvalTaskArgs& task, const std::string& dump_logits_file,
                        int world_size) {
  if (task.task == "loss-by-position" && task.by == "document" && config.data.documents != "eot")
    throw RunError(kExitUsage, "eval --by document: the data has no documents (data.documents is '" +
                                   config.data.documents + "'), so every position would be a window position; "
                                   "set data.documents: eot (and data.eot_token) for packed documents, or use "
                                   "--by window");
  if (!dump_logits_file.empty() && world_size != 1)
    throw RunError(kExitUsage, "eval --dump-logits runs on one rank (dp = cp = tp = 1), so that the logits are in "
                               "sequence order; this job has " + std::to_string(world_size) +
                               " ranks: run it without mpirun");
  std::set<std::string> seen;
  for (const auto& [option, path] : eval_output_paths(task, dump_logits_file)) {
    check_output_file("eval", option, path, task.overwrite);
    std::error_code ec;
    const std::string absolute = std::filesystem::absolute(path, ec).lexically_normal().string();
    if (!seen.insert(absolute).second)
      throw RunError(kExitUsage, "eval " + option + ": '" + path + "' is also another output of this command; "
                                 "give --out and --dump-logits different names");
  }
}

}  // namespace rt
