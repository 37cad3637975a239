// data.eot_token resolved (framework/config/config.h resolved_eot_token).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/config/config.h"
#include "framework/base/data_files.h"
#include "kernels/tensor.h"

namespace rt {

int resolved_eot_token(const Config& config) {
  const DataConfig& d = config.data;
  if (d.eot_token >= 0) return d.eot_token;
  if (d.source != "shards") return -1;
  std::vector<std::string> files;
  try {
    files = expand_data_paths(d.path);
  } catch (const Error&) {
    return 50256;  // the missing files are reported by the data checks
  }
  if (files.empty()) return 50256;
  const std::filesystem::path meta = std::filesystem::path(files.front()).parent_path() / "meta.json";
  std::ifstream in(meta);
  if (!in.good()) return 50256;  // llm.c's GPT-2 shards: <|endoftext|> starts each document
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  RT_CHECK(!j.is_discarded(), "data.eot_token: '" << meta.string() << "' is not valid JSON; fix it or set "
                                                   << "data.eot_token explicitly");
  if (j.contains("eot_token") && j["eot_token"].is_number_integer()) return j["eot_token"].get<int>();
  return 50256;
}

}  // namespace rt
