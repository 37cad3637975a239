// Checkpoint directories: run_dir/checkpoints/<lineage>/step_<N>/{model.safetensors, optimizer.safetensors,
// state.json} (lineages: framework/run/run_dir.h). Save: everything goes into <lineage_dir>/.tmp_step_<N>/, each
// file fsynced, state.json (with a checksum and size, or per-tensor sums, per file) last, the directory fsynced,
// renamed to step_<N>, and the parent fsynced. The files of a training save are written range by range by every
// rank (framework/checkpoint/checkpoint_sharded.h) between begin_checkpoint_save and finish_checkpoint_save.
// A directory counts as a checkpoint only when its name is step_<digits> and it holds state.json, so an
// interrupted save is never mistaken for one. Test hook: RINGTRAIN_TEST_CRASH_IN_SAVE=1 makes the save
// throw after writing model.safetensors into the temporary directory.
#include "framework/checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/checkpoint/checkpoint_internal.h"
#include "framework/base/checkpoint_io.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

constexpr const char* kFormat = "ringtrain-checkpoint-1";
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

bool guard_passed_at(const fs::path& dir) {
  std::ifstream in(dir / kStateFile);
  try {
    const nlohmann::json js = nlohmann::json::parse(in);
    return !js.contains("guard_passed") || js["guard_passed"].get<bool>();
  } catch (const std::exception&) {
    return false;
  }
}

void test_save_delay() {
  const char* delay = std::getenv("RINGTRAIN_TEST_SAVE_DELAY_S");
  if (!delay || !*delay) return;
  const double s = std::atof(delay);
  if (s > 0) ::usleep(useconds_t(s * 1e6));
}

}  // namespace

std::string checkpoint_temp_dir(const std::string& lineage_dir, int64_t step) {
  return (fs::path(lineage_dir) / (".tmp_step_" + std::to_string(step))).string();
}

std::string begin_checkpoint_save(const std::string& lineage_dir, int64_t step) {
  RT_CHECK(step >= 0, "save_checkpoint: step " << step << " is negative");
  const fs::path tmp = checkpoint_temp_dir(lineage_dir, step);
  make_dirs(fs::path(lineage_dir));
  remove_tree(tmp);
  make_dirs(tmp);
  return tmp.string();
}

void crash_in_save_hook(const std::string& written) {
  const char* crash = std::getenv("RINGTRAIN_TEST_CRASH_IN_SAVE");
  if (crash && std::string(crash) == "1")
    throw Error("simulated crash in save_checkpoint (RINGTRAIN_TEST_CRASH_IN_SAVE=1) after writing " + written);
}

std::string finish_checkpoint_save(const std::string& lineage_dir, const TrainState& state, const nlohmann::json& files,
                                   int keep_last, const std::vector<std::string>& keep_always) {
  const fs::path root = fs::path(lineage_dir);
  const std::string name = "step_" + std::to_string(state.step);
  const fs::path tmp = checkpoint_temp_dir(lineage_dir, state.step);
  const fs::path final_dir = root / name;
  nlohmann::json js = {{"format", kFormat},
                       {"step", state.step},
                       {"data_cursor", state.data_cursor},
                       {"rng_state", state.rng_state},
                       {"config_hash", state.config_hash},
                       {"lineage", state.lineage},
                       {"parent", state.parent},
                       {"config", state.config},
                       {"guard_passed", state.guard_passed},
                       {"files", files}};
  write_file_durably((tmp / kStateFile).string(), js.dump(2) + "\n");
  fsync_directory(tmp.string());
  test_save_delay();
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

  // Keep the newest `keep_last` of this lineage (never the one just written, one in keep_always, nor the
  // newest that passed the divergence guard) and drop leftovers of interrupted saves.
  auto all = complete_checkpoints(root);
  fs::path last_good;
  for (const auto& entry : all)
    if (guard_passed_at(entry.second)) last_good = entry.second;
  auto is_kept = [&](const fs::path& p) {
    if (p == final_dir || p == last_good) return true;
    for (const std::string& k : keep_always)
      if (fs::equivalent(p, k, ec)) return true;
    return false;
  };
  const size_t keep = size_t(std::max(keep_last, 1));
  size_t excess = all.size() > keep ? all.size() - keep : 0;
  for (size_t i = 0; i < all.size() && excess > 0; ++i) {
    if (is_kept(all[i].second)) continue;
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

std::string save_checkpoint(const std::string& lineage_dir, const std::vector<HostTensor>& model,
                            const std::vector<HostTensor>& optimizer, const TrainState& state,
                            const ModelConfig& model_config, int keep_last,
                            const std::map<std::string, std::string>& extra_metadata,
                            const std::vector<std::string>& keep_always) {
  const fs::path tmp = begin_checkpoint_save(lineage_dir, state.step);
  write_safetensors((tmp / kModelFile).string(), model, model_file_metadata(model_config, extra_metadata));
  crash_in_save_hook((tmp / kModelFile).string());
  write_safetensors((tmp / kOptimizerFile).string(), optimizer, optimizer_file_metadata(state.step));
  const nlohmann::json files = {{kModelFile, file_record(tmp / kModelFile)},
                                {kOptimizerFile, file_record(tmp / kOptimizerFile)}};
  return finish_checkpoint_save(lineage_dir, state, files, keep_last, keep_always);
}

std::map<std::string, std::string> model_file_metadata(const ModelConfig& model_config,
                                                       const std::map<std::string, std::string>& extra_metadata) {
  std::map<std::string, std::string> meta = model_metadata(model_config);
  for (const auto& [k, v] : extra_metadata) meta[k] = v;
  meta["format"] = "pt";  // lets Hugging Face loaders accept the file as PyTorch-layout weights
  return meta;
}

std::map<std::string, std::string> optimizer_file_metadata(int64_t step) { return {{"step", std::to_string(step)}}; }

namespace {

nlohmann::json read_state_json(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec))
    throw Error("checkpoint '" + dir + "' is not a directory; pass run_dir/checkpoints/<lineage>/step_<N>");
  std::ifstream in(d / kStateFile);
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
  if (!js.is_object()) throw Error("checkpoint '" + dir + "': state.json is not a JSON object");
  return js;
}

const nlohmann::json& state_field(const nlohmann::json& js, const std::string& dir, const char* key) {
  if (!js.contains(key))
    throw Error("checkpoint '" + dir + "': state.json lacks the field '" + std::string(key) + "'");
  return js[key];
}

TrainState parse_state(const nlohmann::json& js, const std::string& dir) {
  if (state_field(js, dir, "format") != kFormat)
    throw Error("checkpoint '" + dir + "': state.json field 'format' is " + state_field(js, dir, "format").dump() +
                ", expected \"" + kFormat + "\"");
  TrainState st;
  try {
    st.step = state_field(js, dir, "step").get<int64_t>();
    st.data_cursor = state_field(js, dir, "data_cursor").get<uint64_t>();
    st.rng_state = state_field(js, dir, "rng_state").get<std::string>();
    st.config_hash = state_field(js, dir, "config_hash").get<std::string>();
    // Fields added with lineages (issue 17); older checkpoints lack them.
    if (js.contains("lineage")) st.lineage = js["lineage"].get<std::string>();
    if (js.contains("parent")) st.parent = js["parent"].get<std::string>();
    if (js.contains("config")) st.config = js["config"].get<std::map<std::string, std::string>>();
    if (js.contains("guard_passed")) st.guard_passed = js["guard_passed"].get<bool>();
  } catch (const nlohmann::json::exception& e) {
    throw Error("checkpoint '" + dir + "': state.json has a field of the wrong type (" + std::string(e.what()) + ")");
  }
  return st;
}

// Checks that state.json records file f (size, and a checksum or per-tensor sums) and that the file has that size.
void check_file_record(const nlohmann::json& js, const std::string& dir, const char* f) {
  const fs::path p = fs::path(dir) / f;
  std::error_code ec;
  const nlohmann::json& files = state_field(js, dir, "files");
  if (!files.contains(f) || !files[f].contains("bytes") ||
      !(files[f].contains("checksum") || files[f].contains("tensor_sums")))
    throw Error("checkpoint '" + dir + "': state.json records no size/checksum for " + f);
  if (!fs::is_regular_file(p, ec))
    throw Error("checkpoint '" + dir + "': " + f + " is missing; use an earlier checkpoint");
  const uint64_t bytes = fs::file_size(p, ec);
  const uint64_t want_bytes = files[f]["bytes"].get<uint64_t>();
  if (bytes != want_bytes)
    throw Error("checkpoint '" + dir + "': " + f + " has " + std::to_string(bytes) + " bytes but state.json "
                "records " + std::to_string(want_bytes) + " (truncated or replaced); use an earlier checkpoint");
}

// Checks one file against the size and checksum (or per-tensor sums) state.json records for it.
void verify_file(const nlohmann::json& js, const std::string& dir, const char* f) {
  const fs::path p = fs::path(dir) / f;
  check_file_record(js, dir, f);
  if (state_field(js, dir, "files")[f].contains("tensor_sums")) {  // written range by range: checked per tensor
    verify_tensor_sums(p.string(), js["files"][f]);
    return;
  }
  uint64_t bytes = 0;
  const std::string sum = file_checksum(p.string(), &bytes);
  const std::string want_sum = js["files"][f]["checksum"].get<std::string>();
  if (sum != want_sum)
    throw Error("checkpoint '" + dir + "': " + f + " is corrupted (checksum " + sum + ", state.json records " +
                want_sum + "); use an earlier checkpoint");
}

}  // namespace

TrainState read_checkpoint_state(const std::string& dir) { return parse_state(read_state_json(dir), dir); }

nlohmann::json read_checkpoint_state(const std::string& dir, TrainState* state) {
  const nlohmann::json js = read_state_json(dir);
  *state = parse_state(js, dir);
  const bool has_optimizer = state_field(js, dir, "files").contains(kOptimizerFile);  // none: weights only
  check_file_record(js, dir, kModelFile);
  if (has_optimizer) check_file_record(js, dir, kOptimizerFile);
  return js["files"];
}

LoadedCheckpoint load_checkpoint(const std::string& dir) {
  const nlohmann::json js = read_state_json(dir);
  LoadedCheckpoint out;
  out.state = parse_state(js, dir);
  const bool has_optimizer = state_field(js, dir, "files").contains(kOptimizerFile);  // a weights-only checkpoint
  verify_file(js, dir, kModelFile);                                                    // (import-hf) has none
  if (has_optimizer) verify_file(js, dir, kOptimizerFile);
  const fs::path d(dir);
  out.model = read_safetensors((d / kModelFile).string(), &out.metadata);
  if (has_optimizer) out.optimizer = read_safetensors((d / kOptimizerFile).string(), nullptr);
  return out;
}

std::vector<HostTensor> load_model_weights(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return read_safetensors(path, metadata);
  if (!fs::is_directory(path, ec))
    throw Error("checkpoint '" + path + "' does not exist; pass run_dir/checkpoints/<lineage>/step_<N> or a "
                "model.safetensors file");
  const fs::path model = fs::path(path) / kModelFile;
  if (!fs::is_regular_file(model, ec))
    throw Error("checkpoint '" + path + "' has no " + kModelFile + "; pass a checkpoint directory "
                "(run_dir/checkpoints/<lineage>/step_<N>)");
  if (fs::is_regular_file(fs::path(path) / kStateFile, ec)) verify_file(read_state_json(path), path, kModelFile);
  return read_safetensors(model.string(), metadata);
}

void save_weights_checkpoint(const std::string& dir, const std::vector<HostTensor>& model, const TrainState& state,
                             const std::map<std::string, std::string>& metadata, bool replace) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !replace)
    throw Error("'" + dir + "' already exists; choose a new --out directory, or pass --overwrite to replace it "
                "(nothing is overwritten without it)");
  write_new_directory(dir, "--out", [&](const std::string& tmp_dir) {
    const fs::path tmp(tmp_dir);
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
  }, replace);
}

std::string latest_checkpoint(const std::string& lineage_dir) {
  auto all = complete_checkpoints(fs::path(lineage_dir));
  return all.empty() ? "" : all.back().second.string();
}

std::vector<std::string> list_checkpoints(const std::string& lineage_dir) {
  std::vector<std::string> out;
  for (const auto& entry : complete_checkpoints(fs::path(lineage_dir))) out.push_back(entry.second.string());
  return out;
}

}  // namespace rt
