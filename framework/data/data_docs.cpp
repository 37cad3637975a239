// data.eot_token resolved (framework/config/config.h resolved_eot_token), and the check that it occurs in the data.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/config/config.h"
#include "framework/base/data_files.h"
#include "framework/data/data.h"
#include "framework/data/data_source.h"
#include "kernels/tensor.h"

namespace rt {

int resolved_eot_token(const Config& config) {
  const DataConfig& d = config.data;
  RT_CHECK(d.eot_token >= -1, "data.eot_token=" << d.eot_token << " is negative; set the token id that starts each "
                                                 << "document (>= 0), or leave it out (-1: meta.json's, else 50256)");
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

namespace {

// Calls visit(tokens (T)) on the first `samples` training samples of a document source, in order, until it returns
// false. Not called without documents or with the copy task.
template <class Visit>
void visit_first_samples(const Config& config, int samples, Visit visit) {
  if (config.data.documents != "eot" || config.data.source == "copy" || samples <= 0) return;
  const std::unique_ptr<SampleSource> source =
      config.data.source == "bytes" ? make_bytes_source(config, false) : make_shard_source(config, false);
  const int64_t T = config.data.seq_len;
  std::vector<int32_t> tokens(static_cast<size_t>(T)), targets(static_cast<size_t>(T));  // (T) each
  std::vector<uint8_t> groups(static_cast<size_t>(T));                                    // (T)
  for (int i = 0; i < samples; ++i) {
    source->sample(uint64_t(i), T, tokens.data(), targets.data(), groups.data());
    if (!visit(tokens)) return;
  }
}

}  // namespace

std::string eot_absence_warning(const Config& config, int samples) {
  if (config.data.documents != "eot" || config.data.source == "copy" || samples <= 0) return "";
  const int32_t eot = resolved_eot_token(config);
  const int64_t T = config.data.seq_len;
  bool found = false;
  visit_first_samples(config, samples, [&](const std::vector<int32_t>& tokens) {
    found = std::find(tokens.begin(), tokens.end(), eot) != tokens.end();
    return !found;
  });
  if (found) return "";
  return "warning: data.eot_token=" + std::to_string(eot) + " does not occur in the first " + std::to_string(samples) +
         " training samples (" + std::to_string(int64_t(samples) * T) + " tokens), so data.documents: eot finds no "
         "document boundary there and each sample trains as one document; set data.eot_token to the token that "
         "starts each document in this data (prepare_data.py writes it to meta.json beside the shards)";
}

std::vector<std::vector<int64_t>> first_samples_doc_starts(const Config& config, int samples) {
  std::vector<std::vector<int64_t>> out;
  if (config.data.documents != "eot" || config.data.source == "copy" || samples <= 0) return out;
  const int32_t eot = resolved_eot_token(config);
  const int64_t T = config.data.seq_len;
  visit_first_samples(config, samples, [&](const std::vector<int32_t>& tokens) {
    std::vector<int64_t> starts(static_cast<size_t>(T), 0);  // (T)
    for (int64_t p = 1; p < T; ++p) starts[size_t(p)] = tokens[size_t(p)] == eot ? p : starts[size_t(p - 1)];
    out.push_back(std::move(starts));
    return true;
  });
  return out;
}

}  // namespace rt
