// Checkpoint directories: run_dir/checkpoints/step_<N>/{model.safetensors, optimizer.safetensors, state.json}.
// Save: everything goes into run_dir/checkpoints/.tmp_step_<N>/, each file fsynced, state.json (with a
// checksum and size per file) last, the directory fsynced, renamed to step_<N>, and the parent fsynced.
// A directory counts as a checkpoint only when its name is step_<digits> and it holds state.json, so an
// interrupted save is never mistaken for one. Test hook: RINGTRAIN_TEST_CRASH_IN_SAVE=1 makes the save
// throw after writing model.safetensors into the temporary directory.
#include "framework/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/checkpoint_io.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

constexpr const char* kFormat = "ringtrain-checkpoint-1";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.json";

// step_<digits> -> the step; -1 for anything else.
int64_t step_of(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() == 5) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (int64_t(1) << 55)) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// Complete checkpoints under run_dir/checkpoints, oldest first.
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return found;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step < 0 || !entry.is_directory(ec)) continue;
    if (!fs::is_regular_file(entry.path() / kStateFile, ec)) continue;
    found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

void remove_tree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) throw Error("cannot remove '" + p.string() + "': " + ec.message());
}

void make_dirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw Error("cannot create directory '" + p.string() + "': " + ec.message() + " (check train.run_dir)");
}

nlohmann::json file_record(const fs::path& file) {
  uint64_t bytes = 0;
  std::string sum = file_checksum(file.string(), &bytes);
  return {{"bytes", bytes}, {"checksum", sum}};
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const std::vector<HostTensor>& model,
                            const std::vector<HostTensor>& optimizer, const TrainState& state,
                            const ModelConfig& model_config, int keep_last,
                            const std::map<std::string, std::string>& extra_metadata) {
  RT_CHECK(state.step >= 0, "save_checkpoint: step " << state.step << " is negative");
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const std::string name = "step_" + std::to_string(state.step);
  const fs::path tmp = root / (".tmp_" + name);
  const fs::path final_dir = root / name;
  make_dirs(root);
  remove_tree(tmp);
  make_dirs(tmp);

  std::map<std::string, std::string> meta = model_metadata(model_config);
  for (const auto& [k, v] : extra_metadata) meta[k] = v;
  meta["format"] = "pt";  // lets Hugging Face loaders accept the file as PyTorch-layout weights
  write_safetensors((tmp / kModelFile).string(), model, meta);
  const char* crash = std::getenv("RINGTRAIN_TEST_CRASH_IN_SAVE");
  if (crash && std::string(crash) == "1")
    throw Error("simulated crash in save_checkpoint (RINGTRAIN_TEST_CRASH_IN_SAVE=1) after writing " +
                (tmp / kModelFile).string());
  write_safetensors((tmp / kOptimizerFile).string(), optimizer, {{"step", std::to_string(state.step)}});

  nlohmann::json js = {{"format", kFormat},
                       {"step", state.step},
                       {"data_cursor", state.data_cursor},
                       {"rng_state", state.rng_state},
                       {"config_hash", state.config_hash},
                       {"files", {{kModelFile, file_record(tmp / kModelFile)},
                                  {kOptimizerFile, file_record(tmp / kOptimizerFile)}}}};
  write_file_durably((tmp / kStateFile).string(), js.dump(2) + "\n");
  fsync_directory(tmp.string());

  // Replace an existing checkpoint of the same step only after the new one is complete.
  const fs::path replaced = root / (".old_" + name);
  std::error_code ec;
  const bool had_old = fs::exists(final_dir, ec);
  if (had_old) {
    remove_tree(replaced);
    fs::rename(final_dir, replaced, ec);
    if (ec) throw Error("cannot move the old '" + final_dir.string() + "' aside: " + ec.message());
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) throw Error("cannot rename '" + tmp.string() + "' to '" + final_dir.string() + "': " + ec.message());
  fsync_directory(root.string());
  if (had_old) remove_tree(replaced);

  // Keep the newest `keep_last` (never the one just written) and drop leftovers of interrupted saves.
  auto all = complete_checkpoints(root);
  const size_t keep = size_t(std::max(keep_last, 1));
  size_t excess = all.size() > keep ? all.size() - keep : 0;
  for (size_t i = 0; i < all.size() && excess > 0; ++i) {
    if (all[i].second == final_dir) continue;
    remove_tree(all[i].second);
    --excess;
  }
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind(".tmp_step_", 0) == 0 || n.rfind(".old_step_", 0) == 0) remove_tree(entry.path());
  }
  fsync_directory(root.string());
  return final_dir.string();
}

LoadedCheckpoint load_checkpoint(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec))
    throw Error("checkpoint '" + dir + "' is not a directory; pass run_dir/checkpoints/step_<N>");
  const fs::path state_path = d / kStateFile;
  std::ifstream in(state_path);
  if (!in)
    throw Error("checkpoint '" + dir + "' has no state.json: it is incomplete (an interrupted save?); use an "
                "earlier checkpoint");
  nlohmann::json js;
  try {
    js = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint '" + dir + "': state.json does not parse (" + std::string(e.what()) +
                "); the file is corrupted, use an earlier checkpoint");
  }
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!js.is_object() || !js.contains(key))
      throw Error("checkpoint '" + dir + "': state.json lacks the field '" + std::string(key) + "'");
    return js[key];
  };
  if (field("format") != kFormat)
    throw Error("checkpoint '" + dir + "': state.json field 'format' is " + field("format").dump() +
                ", expected \"" + kFormat + "\"");
  LoadedCheckpoint out;
  try {
    out.state.step = field("step").get<int64_t>();
    out.state.data_cursor = field("data_cursor").get<uint64_t>();
    out.state.rng_state = field("rng_state").get<std::string>();
    out.state.config_hash = field("config_hash").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint '" + dir + "': state.json has a field of the wrong type (" + std::string(e.what()) + ")");
  }
  const nlohmann::json& files = field("files");
  // A weights-only checkpoint (ringtrain import-hf) records no optimizer file.
  const bool has_optimizer = !files.is_object() || files.contains(kOptimizerFile);
  for (const char* f : {kModelFile, kOptimizerFile}) {
    if (std::string(f) == kOptimizerFile && !has_optimizer) continue;
    const fs::path p = d / f;
    if (!files.contains(f) || !files[f].contains("bytes") || !files[f].contains("checksum"))
      throw Error("checkpoint '" + dir + "': state.json records no size/checksum for " + f);
    if (!fs::is_regular_file(p, ec))
      throw Error("checkpoint '" + dir + "': " + f + " is missing; use an earlier checkpoint");
    uint64_t bytes = 0;
    const std::string sum = file_checksum(p.string(), &bytes);
    const uint64_t want_bytes = files[f]["bytes"].get<uint64_t>();
    const std::string want_sum = files[f]["checksum"].get<std::string>();
    if (bytes != want_bytes)
      throw Error("checkpoint '" + dir + "': " + f + " has " + std::to_string(bytes) + " bytes but state.json "
                  "records " + std::to_string(want_bytes) + " (truncated or replaced); use an earlier checkpoint");
    if (sum != want_sum)
      throw Error("checkpoint '" + dir + "': " + f + " is corrupted (checksum " + sum + ", state.json records " +
                  want_sum + "); use an earlier checkpoint");
  }
  out.model = read_safetensors((d / kModelFile).string(), &out.metadata);
  if (has_optimizer) out.optimizer = read_safetensors((d / kOptimizerFile).string(), nullptr);
  return out;
}

void save_weights_checkpoint(const std::string& dir, const std::vector<HostTensor>& model, const TrainState& state,
                             const std::map<std::string, std::string>& metadata) {
  const fs::path final_dir = fs::path(dir);
  std::error_code ec;
  if (fs::exists(final_dir, ec))
    throw Error("'" + dir + "' already exists; choose a new --out directory (nothing is overwritten)");
  const fs::path parent = final_dir.has_parent_path() ? final_dir.parent_path() : fs::path(".");
  make_dirs(parent);
  const fs::path tmp = parent / (".tmp_" + final_dir.filename().string());
  remove_tree(tmp);
  make_dirs(tmp);
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  write_safetensors((tmp / kModelFile).string(), model, meta);
  nlohmann::json js = {{"format", kFormat},
                       {"step", state.step},
                       {"data_cursor", state.data_cursor},
                       {"rng_state", state.rng_state},
                       {"config_hash", state.config_hash},
                       {"files", {{kModelFile, file_record(tmp / kModelFile)}}}};
  write_file_durably((tmp / kStateFile).string(), js.dump(2) + "\n");
  fsync_directory(tmp.string());
  fs::rename(tmp, final_dir, ec);
  if (ec) throw Error("cannot rename '" + tmp.string() + "' to '" + dir + "': " + ec.message());
  fsync_directory(parent.string());
}

std::string latest_checkpoint(const std::string& run_dir) {
  auto all = complete_checkpoints(fs::path(run_dir) / "checkpoints");
  return all.empty() ? "" : all.back().second.string();
}

}  // namespace rt
