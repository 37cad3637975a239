// framework/eval/command_inputs.h
#include "framework/eval/command_inputs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "framework/base/run_errors.h"
#include "framework/checkpoint/checkpoint.h"

namespace fs = std::filesystem;

namespace rt {

std::string checkpoint_argument_problem(const std::string& path) {
  std::error_code ec;
  // A model.safetensors file inside an HF directory is the same mistake.
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty() || !fs::is_directory(dir, ec)) return "";
  const bool hf_config = fs::is_regular_file(dir / "config.json", ec);
  const bool ringtrain_state = fs::is_regular_file(dir / "state.json", ec);
  const bool hf_shards = fs::is_regular_file(dir / "model.safetensors.index.json", ec);
  if (!(hf_config || hf_shards) || ringtrain_state) return "";
  return "'" + path + "' is a Hugging Face model directory (it has " +
         (hf_config ? "config.json" : "model.safetensors.index.json") + " and no state.json), not a ringtrain " +
         "checkpoint; convert it first with `ringtrain import-hf " + dir.string() + " --out ckpt/imported` and pass " +
         "--checkpoint ckpt/imported";
}

void check_checkpoint_argument(const std::string& command, const std::string& path) {
  const std::string problem = checkpoint_argument_problem(path);
  if (!problem.empty()) throw RunError(kExitUsage, command + " --checkpoint: " + problem);
}

std::vector<HostTensor> load_checkpoint_argument(const std::string& command, const std::string& path,
                                                 std::map<std::string, std::string>* metadata) {
  check_checkpoint_argument(command, path);
  try {
    return load_model_weights(path, metadata);
  } catch (const RunError&) {
    throw;
  } catch (const std::exception& e) {  // missing, not a checkpoint, corrupted: the checkpoint the user named
    throw RunError(kExitUsage, command + " --checkpoint: " + e.what());
  }
}

std::string input_file_problem(const std::string& option, const std::string& path) {
  std::error_code ec;
  if (path.empty()) return "give a file";
  if (fs::is_directory(path, ec)) return "'" + path + "' is a directory; " + option + " needs a file";
  if (!fs::exists(path, ec)) return "'" + path + "' does not exist; give an existing file";
  if (::access(path.c_str(), R_OK) != 0)
    return "'" + path + "' cannot be read (" + std::strerror(errno) + ")";
  return "";
}

std::string read_input_file(const std::string& command, const std::string& option, const std::string& path) {
  const std::string problem = input_file_problem(option, path);
  if (!problem.empty()) throw RunError(kExitUsage, command + " " + option + ": " + problem);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) throw RunError(kExitUsage, command + " " + option + ": reading '" + path + "' failed");
  return ss.str();
}

}  // namespace rt
