// Loading the YAML config, `--set` overrides, the resolved YAML, the start-up table and the model hash.
// Every problem found while reading is collected and reported together, each with its file:line and key.
#include "framework/config/config.h"

// GCC 12 reports a false -Wdangling-pointer inside yaml-cpp's iterator templates (node/impl.h).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#endif
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include "framework/config/config_schema.h"
#include "kernels/tensor.h"

namespace rt {
namespace {

// Throws one rt::Error listing every problem (no internal file:line: these are the user's mistakes).
void throw_problems(const std::vector<std::string>& problems, const std::string& origin) {
  if (problems.size() == 1) throw Error(problems[0]);
  std::ostringstream os;
  os << problems.size() << " problems in config " << origin << ":";
  for (const std::string& p : problems) os << "\n  - " << p;
  throw Error(os.str());
}

std::string where(const std::string& origin, const YAML::Mark& mark) {
  if (mark.line < 0) return origin;
  return origin + ":" + std::to_string(mark.line + 1);
}

const char* node_kind(const YAML::Node& node) {
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "a value";
}

void mark_explicit(Config& config, const std::string& path) {
  if (!config.is_explicit(path)) config.explicit_fields.push_back(path);
}

void mark_explicit(Config& config, const FieldSpec& field) { mark_explicit(config, field.path()); }

// Applies one YAML value to `field`; appends a problem on failure.

void apply_node(Config& config, const FieldSpec& field, const YAML::Node& value, const std::string& loc,
                std::vector<std::string>& problems) {
  mark_explicit(config, field);
  std::string text;
  if (value.IsNull()) {
    if (field.type != FieldType::string) {
      problems.push_back(loc + ": '" + field.path() + "' has no value; write " + field_type_name(field.type) +
                         " after the colon, or delete the line to keep the default (" +
                         field_text(Config{}, field) + ")");
      return;
    }
  } else if (!value.IsScalar()) {
    problems.push_back(loc + ": '" + field.path() + "' must be " + field_type_name(field.type) + ", got " +
                       node_kind(value));
    return;
  } else {
    text = value.Scalar();
  }
  std::string error;
  if (!set_field(config, field, text, &error)) problems.push_back(loc + ": " + error);
  else mark_explicit(config, field.path());
}

std::string unknown_key(const std::string& path) {
  std::string hint = did_you_mean(path);
  return "unknown key '" + path + "'" + (hint.empty() ? "" : " " + hint);
}

// A map nested inside a section (model.rope_scaling): its keys are "<prefix>.<key>".
void apply_group(Config& config, const YAML::Node& body, const std::string& prefix, const std::string& origin,
                 std::vector<std::string>& problems) {
  bool known_group = false;
  for (const FieldSpec& f : config_fields()) known_group |= f.path().rfind(prefix + ".", 0) == 0;
  if (!known_group) {
    problems.push_back(where(origin, body.Mark()) + ": " + unknown_key(prefix));
    return;
  }
  std::set<std::string> seen;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string loc = where(origin, it->first.Mark());
    if (!it->first.IsScalar()) {
      problems.push_back(loc + ": keys must be plain names, got " + std::string(node_kind(it->first)));
      continue;
    }
    const std::string path = prefix + "." + it->first.Scalar();
    if (!seen.insert(path).second) {
      problems.push_back(loc + ": duplicate key '" + path + "'; keep one of them");
      continue;
    }
    if (const FieldSpec* f = find_field(path)) apply_node(config, *f, it->second, loc, problems);
    else problems.push_back(loc + ": " + unknown_key(path));
  }
}

void apply_yaml(Config& config, const YAML::Node& root, const std::string& origin,
                std::vector<std::string>& problems) {
  if (root.IsNull()) return;  // an empty file: all defaults
  if (!root.IsMap()) {
    problems.push_back(where(origin, root.Mark()) +
                       ": the top level must be a map of sections (model:, data:, parallel:, train:, optim:, "
                       "checkpoint:, log:) and device:, got " + node_kind(root));
    return;
  }
  const auto& sections = config_sections();
  std::set<std::string> seen_top;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string loc = where(origin, it->first.Mark());
    if (!it->first.IsScalar()) {
      problems.push_back(loc + ": keys must be plain names, got " + std::string(node_kind(it->first)));
      continue;
    }
    const std::string key = it->first.Scalar();
    if (!seen_top.insert(key).second) {
      problems.push_back(loc + ": duplicate key '" + key + "'; keep one of them");
      continue;
    }
    const bool is_section = std::find(sections.begin(), sections.end(), key) != sections.end();
    if (!is_section) {
      if (const FieldSpec* f = find_field(key)) apply_node(config, *f, it->second, loc, problems);
      else problems.push_back(loc + ": " + unknown_key(key));
      continue;
    }
    const YAML::Node& body = it->second;
    if (body.IsNull()) continue;  // "model:" with nothing under it
    if (!body.IsMap()) {
      problems.push_back(loc + ": section '" + key + "' must be a map of keys (e.g. '" + key +
                         ":' followed by indented 'name: value' lines), got " + node_kind(body));
      continue;
    }
    std::set<std::string> seen;
    for (auto jt = body.begin(); jt != body.end(); ++jt) {
      const std::string inner_loc = where(origin, jt->first.Mark());
      if (!jt->first.IsScalar()) {
        problems.push_back(inner_loc + ": keys must be plain names, got " + std::string(node_kind(jt->first)));
        continue;
      }
      const std::string path = key + "." + jt->first.Scalar();
      if (!seen.insert(path).second) {
        problems.push_back(inner_loc + ": duplicate key '" + path + "'; keep one of them");
        continue;
      }
      if (jt->second.IsMap() && !find_field(path)) {  // a group such as model.rope_scaling
        apply_group(config, jt->second, path, origin, problems);
        continue;
      }
      if (const FieldSpec* f = find_field(path)) apply_node(config, *f, jt->second, inner_loc, problems);
      else problems.push_back(inner_loc + ": " + unknown_key(path));
    }
  }
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

void apply_override(Config& config, const std::string& assignment, std::vector<std::string>& problems) {
  const std::string loc = "--set " + assignment;
  size_t eq = assignment.find('=');
  if (eq == std::string::npos) {
    problems.push_back(loc + ": expected key=value, e.g. --set model.n_layer=4");
    return;
  }
  const std::string key = trim(assignment.substr(0, eq));
  std::string value = trim(assignment.substr(eq + 1));
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
    value = value.substr(1, value.size() - 2);
  const FieldSpec* f = find_field(key);
  if (!f) {
    problems.push_back(loc + ": " + unknown_key(key));
    return;
  }
  mark_explicit(config, *f);
  std::string error;
  if (!set_field(config, *f, value, &error)) problems.push_back(loc + ": " + error);
  else mark_explicit(config, f->path());
}

std::string yaml_quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\', out += ch;
    else if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else out += ch;
  }
  return out + "\"";
}

std::string value_for_yaml(const Config& config, const FieldSpec& f) {
  std::string text = field_text(config, f);
  return f.type == FieldType::string ? yaml_quote(text) : text;
}

// The number of settings (keys with a value) in a parsed YAML document.
int count_settings(const YAML::Node& root) {
  if (!root.IsMap()) return root.IsNull() ? 0 : 1;
  int n = 0;
  for (auto it = root.begin(); it != root.end(); ++it) n += it->second.IsMap() ? int(it->second.size()) : 1;
  return n;
}

}  // namespace

bool Config::is_explicit(const std::string& path) const {
  return std::find(explicit_fields.begin(), explicit_fields.end(), path) != explicit_fields.end();
}

Config parse_config_text(const std::string& yaml_text, const std::vector<std::string>& overrides, int world_size,
                         const std::string& origin, const ModelSourceResolver& resolve_model_source) {
  Config config;
  config.source_path = origin;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw Error(where(origin, e.mark) + ": YAML syntax error: " + e.msg +
                " (check the indentation and the 'key: value' form on that line)");
  }
  std::vector<std::string> problems;
  apply_yaml(config, root, origin, problems);
  for (const std::string& o : overrides) apply_override(config, o, problems);
  if (!problems.empty()) throw_problems(problems, origin);
  if (!config.train.init_from.empty()) {
    if (!resolve_model_source)
      throw Error("train.init_from is set, but this caller cannot read model sources (run it through the "
                  "ringtrain binary)");
    resolve_model_source(config);  // framework/hf/init_from.h
  }
  validate_config(config, world_size);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size,
                   const ModelSourceResolver& resolve_model_source) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::string inside;
    for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
      const std::string ext = e.path().extension().string();
      if ((ext == ".yaml" || ext == ".yml") && inside.size() < 200) inside += (inside.empty() ? "" : ", ") + e.path().string();
    }
    throw Error("config '" + path + "' is a directory; give a YAML file" +
                (inside.empty() ? std::string(" (configs/ holds the examples)") : ", e.g. one of: " + inside));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("config file '" + path + "' cannot be opened (does it exist? configs/ holds the examples)");
  std::stringstream ss;
  ss << in.rdbuf();
  int settings = 0;
  try {
    settings = count_settings(YAML::Load(ss.str()));
  } catch (const YAML::Exception&) {
    settings = 1;  // parse_config_text reports the syntax error with its line
  }
  if (settings == 0)
    throw Error("config file '" + path + "' holds no settings (empty, or only comments); ringtrain does not "
                "train built-in defaults from an empty file. Start from an example in configs/ (e.g. "
                "configs/tiny.yaml)");
  return parse_config_text(ss.str(), overrides, world_size, path, resolve_model_source);
}

std::string config_to_yaml(const Config& config) {
  std::ostringstream os;
  os << "# ringtrain resolved config";
  if (!config.source_path.empty()) os << " (from " << config.source_path << ", overrides applied)";
  os << "\n";
  for (const std::string& section : config_sections()) {
    os << section << ":\n";
    for (const FieldSpec& f : config_fields())
      if (section == f.section) os << "  " << f.name << ": " << value_for_yaml(config, f) << "\n";
  }
  for (const FieldSpec& f : config_fields())
    if (f.section[0] == '\0') os << f.name << ": " << value_for_yaml(config, f) << "\n";
  return os.str();
}

std::string config_table(const Config& config) {
  std::vector<std::array<std::string, 3>> rows;
  for (const FieldSpec& f : config_fields()) {
    std::string v = field_text(config, f);
    if (f.type == FieldType::string && v.empty()) v = "\"\"";
    rows.push_back({f.path(), v, f.help});
  }
  const auto& m = config.model;
  const auto& p = config.parallel;
  const int64_t tokens_per_step = int64_t(config.train.batch_size) * config.data.seq_len;
  rows.push_back({"(derived) head_dim", std::to_string(m.n_head > 0 ? m.d_model / m.n_head : 0),
                  "d_model / n_head"});
  rows.push_back({"(derived) layout", resolved_layout(config), "sequence layout in use"});
  const int eb = config.train.eval_batches;
  rows.push_back({"(derived) eval", config.train.eval_every <= 0 ? std::string("off")
                                    : config.data.source == "copy"
                                        ? std::to_string(eb > 0 ? eb : kGeneratedEvalBatches) + " batches of generated samples"
                                        : eb > 0 ? "first " + std::to_string(int64_t(eb) * config.train.batch_size) +
                                                       " windows of the held-out split"
                                                 : "every window of the held-out split",
                  "consecutive seq_len windows from the split's start; seq_len-1 targets each"});
  rows.push_back({"(derived) world", std::to_string(int64_t(p.dp) * p.cp * p.tp), "dp * cp * tp ranks"});
  rows.push_back({"(derived) tokens/step", std::to_string(tokens_per_step), "batch_size * seq_len"});
  const int u = p.cp_a2a >= 1 ? p.cp_a2a : 1;
  rows.push_back({"(derived) ring degree", std::to_string(p.ring()), "cp / cp_a2a ranks in the ring"});
  rows.push_back({"(derived) a2a degree", p.cp_a2a_auto() ? std::string("auto") : std::to_string(u),
                  "ranks of an all-to-all (head exchange) group"});
  const int head_div = p.tp * u;
  rows.push_back({"(derived) heads/rank",
                  head_div > 0 && m.n_head % head_div == 0 ? std::to_string(m.n_head / head_div) : "(invalid)",
                  "n_head / (tp * cp_a2a) query heads in attention"});
  rows.push_back({"(derived) tokens/rank", std::to_string(p.cp > 0 ? config.data.seq_len / p.cp : 0),
                  "seq_len / cp per sequence"});
  size_t w0 = 3, w1 = 5;
  for (const auto& r : rows) w0 = std::max(w0, r[0].size()), w1 = std::max(w1, r[1].size());
  std::ostringstream os;
  const std::string rule(w0 + w1 + 40, '-');
  os << "config " << (config.source_path.empty() ? "<defaults>" : config.source_path) << "\n" << rule << "\n";
  os << std::left << std::setw(int(w0)) << "key" << "  " << std::setw(int(w1)) << "value" << "  note\n"
     << rule << "\n";
  for (const auto& r : rows)
    os << std::left << std::setw(int(w0)) << r[0] << "  " << std::setw(int(w1)) << r[1] << "  " << r[2] << "\n";
  os << rule << "\n";
  return os.str();
}

std::string model_config_hash(const Config& config) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64 over "model.key=value\n" lines in schema order
  for (const FieldSpec& f : config_fields()) {
    if (std::string(f.section) != "model") continue;
    // Unscaled RoPE hashes as it did before rope_scaling existed, so older checkpoints still resume.
    if (config.model.rope_scaling.type == "none" && f.path().rfind("model.rope_scaling.", 0) == 0) continue;
    for (char ch : f.path() + "=" + field_text(config, f) + "\n") {
      h ^= static_cast<unsigned char>(ch);
      h *= 1099511628211ull;
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}


const char* cp_scheme_setting_name(CpSchemeSetting setting) {
  switch (setting) {
    case CpSchemeSetting::ring: return "ring";
    case CpSchemeSetting::gather: return "gather";
    case CpSchemeSetting::automatic: return "auto";
  }
  return "auto";
}

std::string resolved_layout(const Config& config) {
  const std::string& layout = config.parallel.layout;
  if (layout != "auto") return layout;
  // The model is always causal: zigzag balances the causal work across the ring. With one cp rank
  // every layout is the identity, so contiguous avoids zigzag's even-length requirement.
  // The layout is over the ring (cp / cp_a2a ranks): with cp_a2a = cp every rank sees the whole sample.
  const int ring = config.parallel.ring();
  if (ring > 1 && config.data.documents == "eot") return "balanced";
  return ring > 1 ? "zigzag" : "contiguous";
}

}  // namespace rt
