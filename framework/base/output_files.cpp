// framework/base/output_files.h
#include "framework/base/output_files.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "framework/base/checkpoint_io.h"
#include "framework/base/run_errors.h"

namespace fs = std::filesystem;

namespace rt {

std::string output_file_problem(const std::string& command, const std::string& option, const std::string& path,
                                bool overwrite) {
  (void)command;
  if (path.empty()) return "give a file name";
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (fs::is_directory(fs::status(path, ec)))
    return "'" + path + "' is a directory; " + option + " needs a file path (e.g. " +
           (fs::path(path) / "out.json").string() + ")";
  if (fs::exists(st)) {
    if (!fs::is_regular_file(fs::status(path, ec)))
      return "'" + path + "' exists and is not a regular file; choose a new path";
    if (!overwrite)
      return "'" + path + "' already exists; choose a new path, or pass " + std::string(kOverwriteFlag) +
             " to replace it (nothing is overwritten without it)";
  }
  const fs::path parent = fs::absolute(fs::path(path), ec).parent_path();
  if (!fs::is_directory(parent, ec))
    return "the directory '" + parent.string() + "' of '" + path + "' does not exist" +
           (fs::exists(parent, ec) ? " (it is a file)" : "") + "; create it first or choose another path";
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    return "the directory '" + parent.string() + "' cannot be written (" + std::strerror(errno) +
           "); choose a path in a directory you can write";
  return "";
}

void check_output_file(const std::string& command, const std::string& option, const std::string& path,
                       bool overwrite) {
  const std::string problem = output_file_problem(command, option, path, overwrite);
  if (!problem.empty()) throw RunError(kExitUsage, command + " " + option + ": " + problem);
}

OutputFiles::~OutputFiles() {
  std::error_code ec;
  for (const Pending& p : pending_) fs::remove(p.tmp, ec);
}

std::string OutputFiles::temporary(const std::string& option, const std::string& path) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp =
      (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  pending_.push_back({option, path, tmp});
  return tmp;
}

void OutputFiles::write_text(const std::string& option, const std::string& path, const std::string& contents) {
  const std::string tmp = temporary(option, path);
  try {
    write_file_durably(tmp, contents);
  } catch (const std::exception& e) {
    throw RunError(kExitUsage, command_ + " " + option + ": cannot write '" + path + "': " + e.what() +
                                   "; none of this command's outputs was written");
  }
}

void OutputFiles::commit() {
  for (size_t i = 0; i < pending_.size(); ++i) {
    std::error_code ec;
    fs::rename(pending_[i].tmp, pending_[i].path, ec);
    if (ec) {
      const Pending failed = pending_[i];
      pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(i));  // renamed: no longer temporaries
      throw RunError(kExitUsage, command_ + " " + failed.option + ": cannot rename '" + failed.tmp + "' to '" +
                                     failed.path + "': " + ec.message());
    }
  }
  pending_.clear();
}

}  // namespace rt
