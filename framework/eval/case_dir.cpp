// framework/eval/case_dir.h
#include "framework/eval/case_dir.h"

#include <fstream>

#include "framework/base/data_files.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {

nlohmann::json read_case_json(const fs::path& path, const std::string& what, const std::string& maker) {
  std::ifstream in(path);
  RT_CHECK(in.good(), "--cases: cannot read '" << path.string() << "' (" << what << "); point --cases at a directory "
                                                << "written by " << maker);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  RT_CHECK(!j.is_discarded() && j.is_object(), "--cases: '" << path.string() << "' is not a JSON object; rebuild the "
                                                            << "cases with " << maker);
  return j;
}

std::string case_format(const nlohmann::json& meta) {
  if (!meta.contains("format")) return "";
  return meta["format"].is_string() ? meta["format"].get<std::string>() : meta["format"].dump();
}

std::string data_tokenizer(const Config& config) {
  const DataConfig& d = config.data;
  if (d.source == "copy" || d.source == "bytes") return d.source;
  std::vector<std::string> files = expand_data_paths(d.path);
  if (files.empty()) return "";
  const fs::path meta = fs::path(files.front()).parent_path() / "meta.json";
  if (!fs::exists(meta)) return "";
  const nlohmann::json j = read_case_json(meta, "the data's meta.json", "launch/prepare_data.py");
  if (!j.contains("tokenizer_sha256") || !j["tokenizer_sha256"].is_string()) return "";
  return "sha256:" + j["tokenizer_sha256"].get<std::string>();
}

std::string check_case_tokenizer(const Config& config, const std::string& dir, const std::string& theirs,
                                 int64_t vocab, const std::string& maker, const std::string& task) {
  std::string note;
  const std::string ours = data_tokenizer(config);
  if (ours.empty()) {
    note = task + ": the data (data.path=" + config.data.path + ") has no meta.json with tokenizer_sha256 beside "
           "it, so the cases' tokenizer (" + theirs + ") is not checked against it; only the vocabulary is";
  } else {
    RT_CHECK(theirs == ours, "--cases " << dir << " was made with tokenizer " << theirs << " but the config's data ("
             << "data.source=" << config.data.source << ") uses " << ours << "; rebuild the cases with " << maker
             << " and the data's tokenizer (" << (ours == "copy" ? "--copy-task" : ours == "bytes"
             ? "--bytes" : "--tokenizer <the tokenizer.json the data was prepared with>") << ")");
  }
  const int64_t V = config.model.vocab_size;
  RT_CHECK(vocab <= V, "--cases " << dir << ": its vocabulary (" << vocab << " tokens) is larger than the model's "
                                  << "(model.vocab_size=" << V << "); rebuild the cases with the model's tokenizer");
  RT_CHECK(theirs != "copy" || vocab == V, "--cases " << dir << ": copy-task cases for a vocabulary of " << vocab
           << " but model.vocab_size=" << V << " (the separator is vocab_size-1); rebuild them with " << maker
           << " --copy-task --vocab-size " << V);
  return note;
}

}  // namespace rt
