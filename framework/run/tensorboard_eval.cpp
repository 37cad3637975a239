// Eval task results as TensorBoard event files (framework/run/tensorboard_eval.h).
#include "framework/run/tensorboard_eval.h"

#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "framework/run/tensorboard.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

std::vector<nlohmann::json> read_rows(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("tensorboard: cannot read back '" + path + "' to write its events");
  std::vector<nlohmann::json> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// A checkpoint's name for the events' directory: step_N (a directory; <lineage>_step_N for a lineage other than
// main, so that two lineages' step_N never share one), or the file's stem (model.safetensors: its directory's).
std::string checkpoint_name(const std::string& checkpoint) {
  fs::path p = fs::path(checkpoint).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.extension() == ".safetensors") p = p.stem() == "model" ? p.parent_path() : fs::path(p.stem());
  std::string name = p.filename().string();
  const std::string lineage = p.parent_path().filename().string();
  if (!name.empty() && !lineage.empty() && lineage != "main" && lineage != "checkpoints" &&
      p.parent_path().parent_path().filename() == "checkpoints")
    name = lineage + "_" + name;
  return name.empty() ? "checkpoint" : name;
}

}  // namespace

std::string eval_events_dir(const Config& config, const std::string& task, const std::string& checkpoint) {
  std::error_code ec;
  std::string run_dir;
  for (fs::path p = fs::absolute(checkpoint, ec).lexically_normal(); p.has_parent_path() && p != p.parent_path();
       p = p.parent_path())
    if (p.filename() == "checkpoints") {
      run_dir = p.parent_path().string();
      break;
    }
  if (run_dir.empty() && fs::is_directory(config.train.run_dir, ec)) run_dir = config.train.run_dir;
  if (run_dir.empty()) return "";
  std::string name = task;
  for (char& c : name)
    if (c == '-') c = '_';
  return (fs::path(tensorboard_dir(run_dir)) / "eval" / (name + "_" + checkpoint_name(checkpoint))).string();
}

namespace {

std::string write_events(const Config& config, const std::string& task, const std::string& results_jsonl,
                         const std::string& checkpoint) {
  if (!config.log.tensorboard) return "";
  if (!tensorboard_built()) return tensorboard_off_line();
  const std::string dir = eval_events_dir(config, task, checkpoint);
  if (dir.empty())
    return "tensorboard: no event files for this eval: " + checkpoint + " is not under a run directory's "
           "checkpoints/ and train.run_dir '" + config.train.run_dir + "' does not exist (the results are in " +
           results_jsonl + ")";
  std::error_code ec;
  fs::remove_all(dir, ec);  // an earlier evaluation of this task and checkpoint: replaced, as its .jsonl is
  const std::vector<nlohmann::json> rows = read_rows(results_jsonl);
  TensorBoardWriter events(dir, 1);
  if (task == "loss-by-position") {
    for (const nlohmann::json& r : rows) {
      const std::string tag = "loss_by_position/" + r.at("by").get<std::string>();
      events.write_scalars(r.at("lo").get<int64_t>(),
                           {{tag, r.at("mean_loss").get<double>()}, {tag + "_targets", r.at("targets").get<double>()}});
    }
  } else if (task == "needle") {
    // (kind, length, depth %) -> sums of accuracy, exact, mean_logprob and the case count, in file order.
    std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<double>> groups;
    for (const nlohmann::json& r : rows) {
      const auto key = std::make_tuple(r.at("kind").get<std::string>(), r.at("length").get<int64_t>(),
                                       int64_t(std::llround(100 * r.at("depth").get<double>())));
      std::vector<double>& g = groups[key];
      g.resize(4, 0.0);
      g[0] += r.at("accuracy").get<double>();
      g[1] += r.at("exact").get<bool>() ? 1.0 : 0.0;
      g[2] += r.at("mean_logprob").get<double>();
      g[3] += 1;
    }
    for (const auto& [key, g] : groups) {
      const auto& [kind, length, depth] = key;
      const std::string tag = "needle/" + kind + "_len" + std::to_string(length) + "/";
      events.write_scalars(depth, {{tag + "accuracy", g[0] / g[3]}, {tag + "exact", g[1] / g[3]},
                                   {tag + "mean_logprob", g[2] / g[3]}});
    }
  } else {
    return "";
  }
  return "tensorboard: " + events.path();
}

}  // namespace

void write_eval_events(const Config& config, const std::string& task, const std::string& results_jsonl,
                       const std::string& checkpoint) {
  std::string line;
  try {
    line = write_events(config, task, results_jsonl, checkpoint);
  } catch (const std::exception& e) {
    line = std::string("warning: ") + e.what() + " (the results are in " + results_jsonl + ")";
  }
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace rt
