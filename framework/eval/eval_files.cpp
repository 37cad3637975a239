// framework/eval/eval_files.h
#include "framework/eval/eval_files.h"

#include <filesystem>

#include "framework/base/checkpoint_io.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {

void write_result_file(const std::string& path, const std::string& contents) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  RT_CHECK(!ec, "cannot create the directory '" << dir.string() << "' for '" << path << "': " << ec.message()
                                                 << "; choose another --out");
  const fs::path tmp = dir / ("." + target.filename().string() + ".tmp");
  try {
    write_file_durably(tmp.string(), contents);
    fs::rename(tmp, target);
  } catch (const std::exception& e) {
    fs::remove(tmp, ec);
    throw Error("cannot write '" + path + "': " + e.what() + "; nothing was written there");
  }
}

}  // namespace rt
