// The output files of a command (generate --out / --dump-logits, eval --out / --dump-logits), under one rule:
//   - refused before the work starts: an existing file unless the user passed --overwrite (kOverwriteFlag, named
//     in the message); a directory where a file is needed (always); a missing parent directory; a directory this
//     process cannot write into;
//   - written whole to hidden temporaries beside their targets and renamed onto them all together at the end
//     (OutputFiles::commit), so a failure (a full disk, an error halfway) leaves none of them, not even the ones
//     finished first.
// Every refusal is a RunError with kExitUsage (a usage error: exit 2).
#pragma once
#include <string>
#include <vector>

namespace rt {

constexpr const char* kOverwriteFlag = "--overwrite";

// "" or why `path` (given as `option` to `command`) cannot be written: named with the cause and the fix.
std::string output_file_problem(const std::string& command, const std::string& option, const std::string& path,
                                bool overwrite);
// Throws RunError(kExitUsage, "<command> <option>: ...") when output_file_problem is not "".
void check_output_file(const std::string& command, const std::string& option, const std::string& path,
                       bool overwrite);

// A command's outputs, written to temporaries and renamed onto their targets together.
class OutputFiles {
 public:
  explicit OutputFiles(std::string command) : command_(std::move(command)) {}
  ~OutputFiles();  // removes every temporary not renamed (an error on the way)
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;
  // The temporary to write `path`'s contents into (a hidden name in the same directory: the rename cannot cross
  // file systems). `option` names the flag in errors.
  std::string temporary(const std::string& option, const std::string& path);
  // Writes `contents` to `path`'s temporary (fsynced).
  void write_text(const std::string& option, const std::string& path, const std::string& contents);
  // Renames every temporary onto its target. On a failure the temporaries left are removed and a RunError
  // (kExitUsage) names the file; the targets renamed before it stay (a rename within a directory does not fail
  // for lack of space).
  void commit();

 private:
  struct Pending {
    std::string option, path, tmp;
  };
  std::string command_;
  std::vector<Pending> pending_;
};

}  // namespace rt
