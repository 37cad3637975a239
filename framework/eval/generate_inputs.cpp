// The inputs of `ringtrain generate` (framework/eval/generate.h): prompt ids, the EOS id, the prompt's length
// against the trained context.
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "framework/eval/generate.h"
#include "kernels/tensor.h"

namespace rt {
namespace {

// eos_token_id of a Hugging Face JSON file (an integer or a list: its first), or -1.
int64_t eos_from_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return -1;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("eos_token_id")) return -1;
  const nlohmann::json& e = j["eos_token_id"];
  if (e.is_number_integer()) return e.get<int64_t>();
  if (e.is_array() && !e.empty() && e[0].is_number_integer()) return e[0].get<int64_t>();
  return -1;
}

}  // namespace

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what) {
  std::string s = text;
  size_t first = s.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && s[first] == '[') {  // a JSON array
    const size_t last = s.find_last_of(']');
    RT_CHECK(last != std::string::npos && last > first, what << ": a '[' without its ']'; give a JSON array of token "
                                                                 "ids such as [1, 2, 3]");
    s = s.substr(first + 1, last - first - 1);
  }
  for (char& c : s)
    if (c == ',') c = ' ';
  std::istringstream in(s);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    RT_CHECK(end && *end == '\0' && v >= 0 && v <= INT32_MAX,
             what << ": '" << word << "' (entry " << ids.size() << ") is not a token id; give non-negative integers "
                  << "separated by commas or spaces, e.g. \"1,2,3\"");
    ids.push_back(int32_t(v));
  }
  return ids;
}

int64_t resolve_eos_id(const GenerateArgs& args, const Config& config, const std::string& hf_source) {
  if (args.eos_given) return args.eos_id < 0 ? -1 : args.eos_id;
  if (!hf_source.empty()) {
    const std::filesystem::path dir(hf_source);
    int64_t id = eos_from_json(dir / "config.json");
    if (id < 0) id = eos_from_json(dir / "generation_config.json");
    if (id >= 0) return id;
  }
  return config.data.eot_token >= 0 ? config.data.eot_token : -1;
}

std::string check_prompt_length(int64_t prompt_len, int64_t trained_len, const RopeScalingConfig& rope,
                                std::string* warning) {
  if (prompt_len <= trained_len) return "";
  const int64_t covered = rope.type == "none" ? 0 : int64_t(std::floor(rope.original_max_position_embeddings *
                                                                       rope.factor));
  std::ostringstream f;
  f << rope.factor;
  const std::string factor = f.str();
  if (prompt_len <= covered) {
    *warning = "the prompt has " + std::to_string(prompt_len) + " tokens, more than the " +
               std::to_string(trained_len) + " the model was trained at; model.rope_scaling (" + rope.type +
               ", factor " + factor + ") covers " + std::to_string(covered) +
               " positions, so it runs, but quality past the trained length is not known";
    return "";
  }
  return "the prompt has " + std::to_string(prompt_len) + " tokens but the model was trained at a context of " +
         std::to_string(trained_len) + " tokens" +
         (covered > 0 ? " (its RoPE scaling covers " + std::to_string(covered) + ")" : "") +
         "; give a prompt of at most " + std::to_string(std::max(trained_len, covered)) +
         " tokens, or extend the context first (model.rope_scaling and a fine-tune at the longer length)";
}

}  // namespace rt
