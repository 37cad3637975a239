// The run directory: lock, lineage record, metrics de-duplication, resolved config.
#include "framework/run/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/checkpoint/checkpoint.h"
#include "framework/base/checkpoint_io.h"
#include "framework/base/run_errors.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

[[noreturn]] void run_dir_error(const std::string& dir, const std::string& why) {
  throw RunError(kExitUsage, "train.run_dir='" + dir + "' cannot be used: " + why +
                                 "; choose a directory you can write (e.g. --set train.run_dir=runs/mine)");
}

std::string free_name(const std::string& stem) {
  for (int k = 1;; ++k) {
    const std::string name = stem + "." + std::to_string(k);
    std::error_code ec;
    if (!fs::exists(name, ec)) return name;
  }
}

}  // namespace

std::string prepare_run_dir(const Config& config) {
  const std::string& dir = config.train.run_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) run_dir_error(dir, "creating it failed (" + ec.message() + ")");
  if (!fs::is_directory(dir, ec)) run_dir_error(dir, "it exists and is not a directory");
  const std::string final_path = resolved_config_path(config);
  const std::string tmp_path = final_path + ".tmp";
  try {
    write_file_durably(tmp_path, config_to_yaml(config));
  } catch (const Error& e) {
    run_dir_error(dir, e.what());
  }
  fs::rename(tmp_path, final_path, ec);
  if (ec) run_dir_error(dir, "renaming '" + tmp_path + "' failed (" + ec.message() + ")");
  return dir;
}

std::string metrics_path(const Config& config) {
  return (fs::path(config.train.run_dir) / config.log.metrics_file).string();
}

std::string resolved_config_path(const Config& config) {
  return (fs::path(config.train.run_dir) / "config.yaml").string();
}

RunDirLock::RunDirLock(const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) run_dir_error(run_dir, "creating it failed (" + ec.message() + ")");
  if (!fs::is_directory(run_dir, ec)) run_dir_error(run_dir, "it exists and is not a directory");
  const std::string path = (fs::path(run_dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) run_dir_error(run_dir, "cannot create its lock file " + path + " (" + std::strerror(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::ifstream in(path);
    std::string holder;
    std::getline(in, holder);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) run_dir_error(run_dir, "locking " + path + " failed (" + std::strerror(err) + ")");
    throw RunError(kExitUsage, "train.run_dir='" + run_dir + "' is in use by another run (" +
                                   (holder.empty() ? std::string("holder unknown") : holder) +
                                   "); wait for it to end or stop it, or use another train.run_dir");
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  char when[64] = {0};
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  const std::string text = "pid " + std::to_string(::getpid()) + " on host " + host + ", started " + when + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != ssize_t(text.size()))
    run_dir_error(run_dir, "writing its lock file failed (" + std::string(std::strerror(errno)) + ")");
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::optional<RunRecord> read_run_record(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "run.json");
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    return RunRecord{j.at("lineage").get<std::string>(), j.value("parent", std::string())};
  } catch (const std::exception& e) {
    throw RunError(kExitUsage, "'" + (fs::path(run_dir) / "run.json").string() + "' is damaged (" + e.what() +
                                   "); delete it to start a new lineage, or restore it");
  }
}

void write_run_record(const std::string& run_dir, const RunRecord& record) {
  const fs::path path = fs::path(run_dir) / "run.json";
  const nlohmann::json j = {{"lineage", record.lineage}, {"parent", record.parent}};
  write_file_durably(path.string() + ".tmp", j.dump(2) + "\n");
  std::error_code ec;
  fs::rename(path.string() + ".tmp", path, ec);
  if (ec) throw Error("cannot rename " + path.string() + ".tmp: " + ec.message());
}

std::string lineage_dir(const std::string& run_dir, const std::string& lineage) {
  return (fs::path(run_dir) / "checkpoints" / lineage).string();
}

std::vector<std::string> all_checkpoints(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::vector<std::string> out = list_checkpoints(root.string());  // from before lineages
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory(ec) || name.rfind("step_", 0) == 0 || name[0] == '.') continue;
    for (const std::string& c : list_checkpoints(entry.path().string())) out.push_back(c);
  }
  return out;
}

std::string branch_lineage_name(const std::string& run_dir, const std::string& base, int64_t step) {
  const std::string stem = base + ".b" + std::to_string(step);
  std::error_code ec;
  if (!fs::exists(lineage_dir(run_dir, stem), ec)) return stem;
  for (int k = 2;; ++k)
    if (!fs::exists(lineage_dir(run_dir, stem + "-" + std::to_string(k)), ec)) return stem + "-" + std::to_string(k);
}

std::string move_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return "";
  std::string kept, moved, line;
  while (std::getline(in, line)) {
    int64_t at = -1;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) at = j["step"].get<int64_t>();
    } catch (const std::exception&) {
      at = -1;  // an unparsable (torn) line stays where it is
    }
    (at > step ? moved : kept) += line + "\n";
  }
  in.close();
  if (moved.empty()) return "";
  const std::string side = free_name(path + ".after-step" + std::to_string(step));
  write_file_durably(side, moved);
  write_file_durably(path + ".tmp", kept);
  std::error_code ec;
  fs::rename(path + ".tmp", path, ec);
  if (ec) throw Error("cannot rename " + path + ".tmp to " + path + ": " + ec.message());
  return side;
}

std::string move_metrics_aside(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) == 0) return "";
  const std::string side = free_name(path + ".previous");
  fs::rename(path, side, ec);
  if (ec) throw Error("cannot move " + path + " aside to " + side + ": " + ec.message());
  return side;
}

}  // namespace rt
