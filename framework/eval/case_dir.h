// The case directories the generators in launch/ write (make_needles.py, make_ruler.py): their JSON files and the
// check of the cases' tokenizer against the config's data, shared by `ringtrain eval --task needle | ruler`.
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/config/config.h"
#include "kernels/tensor.h"

namespace rt {

// A JSON object from `path` (what: what it holds); throws naming the file and `maker` (the script that writes it).
nlohmann::json read_case_json(const std::filesystem::path& path, const std::string& what, const std::string& maker);

// meta.json's "format" (ringtrain-needles, ringtrain-ruler): the string, another value as JSON, "" when absent.
std::string case_format(const nlohmann::json& meta);

// The tokenizer the config's data was made with: "copy", "bytes", "sha256:<hex>" from the shards' meta.json
// (launch/prepare_data.py), or "" when the shards have none.
std::string data_tokenizer(const Config& config);

// Checks the cases' tokenizer (meta.json's "tokenizer": `theirs`) and vocabulary against the config's data and
// model: another tokenizer, a vocabulary larger than model.vocab_size, or copy-task cases of another vocabulary are
// refused (naming `dir`, both sides and the `maker` option to rebuild them with). Returns "" or a note when the
// data records no tokenizer to check against (only the vocabulary is checked then). `task`: for the messages.
std::string check_case_tokenizer(const Config& config, const std::string& dir, const std::string& theirs,
                                 int64_t vocab, const std::string& maker, const std::string& task);

// j[key] as T; throws naming `where`, the field and `maker` when it is missing or of another type.
template <class T>
T case_field(const nlohmann::json& j, const char* key, const std::string& where, const std::string& maker) {
  if (!j.contains(key))
    throw Error(where + ": field '" + key + "' is missing; rebuild the cases with " + maker);
  try {
    return j[key].get<T>();
  } catch (const std::exception&) {
    throw Error(where + ": field '" + key + "' has the wrong type (" + j[key].dump() + "); rebuild the cases with " +
                maker);
  }
}

}  // namespace rt
