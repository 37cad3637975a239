// Creating the run directory and saving the resolved config in it.
#include "framework/run_dir.h"

#include <filesystem>

#include "framework/checkpoint_io.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {

std::string prepare_run_dir(const Config& config) {
  const std::string& dir = config.train.run_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create the run directory '" + dir + "': " + ec.message() + " (check train.run_dir)");
  const std::string final_path = resolved_config_path(config);
  const std::string tmp_path = final_path + ".tmp";
  write_file_durably(tmp_path, config_to_yaml(config));
  fs::rename(tmp_path, final_path, ec);
  if (ec) throw Error("cannot rename '" + tmp_path + "' to '" + final_path + "': " + ec.message());
  return dir;
}

std::string metrics_path(const Config& config) {
  return (fs::path(config.train.run_dir) / config.log.metrics_file).string();
}

std::string resolved_config_path(const Config& config) {
  return (fs::path(config.train.run_dir) / "config.yaml").string();
}

}  // namespace rt
