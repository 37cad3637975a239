// Reading and writing Hugging Face Llama-family directories (framework/hf/hf_format.h).
#include "framework/hf/hf_format.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "framework/base/checkpoint_io.h"
#include "framework/model/model.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {
namespace {

[[noreturn]] void refuse(const std::string& dir, const std::string& what) {
  throw Error("Hugging Face model '" + dir + "': " + what);
}

nlohmann::json read_json_file(const fs::path& path, const std::string& dir) {
  std::ifstream in(path);
  if (!in) refuse(dir, "cannot open " + path.filename().string() + " (is this a Hugging Face model directory?)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    refuse(dir, path.filename().string() + " does not parse as JSON (" + std::string(e.what()) + ")");
  }
}

// A config field: integer, number, bool or string, with the field named when it has the wrong type.
struct Fields {
  const nlohmann::json& js;
  const std::string& dir;
  const char* where;  // "config.json" or "config.json rope_scaling"
  bool has(const char* key) const { return js.contains(key) && !js[key].is_null(); }
  std::string value(const char* key) const { return js.contains(key) ? js[key].dump() : "absent"; }
  int64_t integer(const char* key) const {
    if (!has(key)) refuse(dir, std::string(where) + " lacks '" + key + "'");
    const auto& v = js[key];
    if (!v.is_number_integer()) refuse(dir, std::string(where) + " field '" + key + "' = " + v.dump() + " is not an integer");
    return v.get<int64_t>();
  }
  int64_t integer_or(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const char* key) const {
    if (!has(key)) refuse(dir, std::string(where) + " lacks '" + key + "'");
    const auto& v = js[key];
    if (!v.is_number()) refuse(dir, std::string(where) + " field '" + key + "' = " + v.dump() + " is not a number");
    return v.get<double>();
  }
  double number_or(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!js[key].is_boolean()) refuse(dir, std::string(where) + " field '" + key + "' = " + js[key].dump() + " is not true/false");
    return js[key].get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!js[key].is_string()) refuse(dir, std::string(where) + " field '" + key + "' = " + js[key].dump() + " is not a string");
    return js[key].get<std::string>();
  }
};

int checked_int(const std::string& dir, const char* key, int64_t v) {
  if (v < 1 || v > (int64_t(1) << 30)) refuse(dir, std::string("config.json field '") + key + "' = " + std::to_string(v) + " is out of range");
  return int(v);
}

// rope_parameters (5.x) or rope_scaling (4.x) -> model.rope_scaling, with transformers' defaults.
void read_rope(const nlohmann::json& rope, const char* where, int64_t max_positions, const std::string& dir,
               ModelConfig& m) {
  const Fields r{rope, dir, where};
  if (!r.has("rope_type") && !r.has("type")) {
    // transformers fails on a scaling without a type; taking it as "default" would drop its factor silently.
    std::string fields;
    for (auto it = rope.begin(); it != rope.end(); ++it)
      if (it.key() != "rope_theta" && it.key() != "partial_rotary_factor") fields += (fields.empty() ? "'" : ", '") + it.key() + "' = " + it.value().dump();
    if (!fields.empty())
      refuse(dir, std::string(where) + " has no 'rope_type' (or 'type') but sets " + fields +
                      "; add the scaling it was trained with, e.g. \"rope_type\": \"linear\" (or llama3, yarn), or "
                      "remove these fields if the model uses plain RoPE");
  }
  const std::string type = r.string_or("rope_type", r.string_or("type", "default"));
  RopeScalingConfig& s = m.rope_scaling;
  const std::string field = std::string(where) + (rope.contains("rope_type") ? " field 'rope_type'" : " field 'type'");
  if (r.has("partial_rotary_factor") && r.number("partial_rotary_factor") != 1.0)
    refuse(dir, std::string(where) + " field 'partial_rotary_factor' = " + r.value("partial_rotary_factor") +
                    " is not supported (ringtrain rotates the whole head)");
  if (type == "default") {
    s.type = "none";
    return;
  }
  if (type != "linear" && type != "llama3" && type != "yarn")
    refuse(dir, field + " = \"" + type + "\" is not supported; ringtrain supports default, linear, llama3 and yarn");
  s.type = type;
  s.factor = r.number("factor");
  if (type == "llama3") {
    s.low_freq_factor = r.number("low_freq_factor");
    s.high_freq_factor = r.number("high_freq_factor");
    s.original_max_position_embeddings = checked_int(dir, "original_max_position_embeddings",
                                                     r.integer("original_max_position_embeddings"));
  }
  if (type == "yarn") {
    for (const char* key : {"mscale", "mscale_all_dim"})
      if (r.has(key)) refuse(dir, std::string(where) + " field '" + key + "' = " + r.value(key) + " is not supported (DeepSeek-style yarn)");
    if (!r.boolean_or("truncate", true))
      refuse(dir, std::string(where) + " field 'truncate' = false is not supported");
    // transformers 5.x: original_max_position_embeddings defaults to max_position_embeddings.
    s.original_max_position_embeddings = checked_int(
        dir, "original_max_position_embeddings", r.integer_or("original_max_position_embeddings", max_positions));
    s.beta_fast = r.number_or("beta_fast", 32);
    s.beta_slow = r.number_or("beta_slow", 1);
    s.attention_factor = r.number_or("attention_factor", 0);
  }
}

const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> names = {
      {"attn_norm.weight", "input_layernorm.weight"},   {"attn.wq.weight", "self_attn.q_proj.weight"},
      {"attn.wk.weight", "self_attn.k_proj.weight"},    {"attn.wv.weight", "self_attn.v_proj.weight"},
      {"attn.wo.weight", "self_attn.o_proj.weight"},    {"mlp_norm.weight", "post_attention_layernorm.weight"},
      {"mlp.w1.weight", "mlp.gate_proj.weight"},        {"mlp.w3.weight", "mlp.up_proj.weight"},
      {"mlp.w2.weight", "mlp.down_proj.weight"},
  };
  return names;
}

// Training from a NaN or Inf weight diverges at once, with an error that blames the learning rate.
void refuse_non_finite(const std::string& dir, const std::string& file, const std::string& hf_name,
                       const std::vector<float>& values) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i]) && bad++ == 0) first = i;
  if (bad == 0) return;
  const float v = values[first];
  refuse(dir, "tensor '" + hf_name + "' in " + fs::path(file).filename().string() + " holds " + std::to_string(bad) +
                  " non-finite value(s) (the first, " + (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf") +
                  ", at flat index " + std::to_string(first) + "); the weights are damaged or come from a diverged "
                  "run: download the model again or export it from a good checkpoint");
}

std::string json_text(double v) {
  nlohmann::json j = v;
  return j.dump();
}

}  // namespace

bool is_hf_model_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

HfModelInfo read_hf_config(const std::string& dir) {
  HfModelInfo info;
  info.raw = read_json_file(fs::path(dir) / "config.json", dir);
  const nlohmann::json& js = info.raw;
  if (!js.is_object()) refuse(dir, "config.json is not a JSON object");
  const Fields f{js, dir, "config.json"};
  // Architecture.
  if (f.has("architectures")) {
    const auto& a = js["architectures"];
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      refuse(dir, "config.json field 'architectures' = " + a.dump() + " is not a list of one name");
    info.architecture = a[0].get<std::string>();
  } else {
    const std::string type = f.string_or("model_type", "");
    info.architecture = type == "llama" ? "LlamaForCausalLM" : type == "mistral" ? "MistralForCausalLM" : "";
    if (info.architecture.empty())
      refuse(dir, "config.json has no 'architectures' and field 'model_type' = " + f.value("model_type") +
                      "; ringtrain imports LlamaForCausalLM and MistralForCausalLM");
  }
  if (info.architecture != "LlamaForCausalLM" && info.architecture != "MistralForCausalLM")
    refuse(dir, "config.json field 'architectures' = [\"" + info.architecture +
                    "\"] is not supported; ringtrain imports LlamaForCausalLM and MistralForCausalLM");
  // Refusals that change the math.
  if (f.has("sliding_window"))
    refuse(dir, "config.json field 'sliding_window' = " + f.value("sliding_window") +
                    " is not supported (ringtrain attends to the whole causal context); a model trained with a sliding "
                    "window cannot be imported");
  if (f.boolean_or("use_sliding_window", false))
    refuse(dir, "config.json field 'use_sliding_window' = true is not supported");
  if (f.boolean_or("attention_bias", false))
    refuse(dir, "config.json field 'attention_bias' = true is not supported (ringtrain's projections have no bias)");
  if (f.boolean_or("mlp_bias", false))
    refuse(dir, "config.json field 'mlp_bias' = true is not supported (ringtrain's MLP has no bias)");
  if (f.boolean_or("rope_interleaved", false))
    refuse(dir, "config.json field 'rope_interleaved' = true is not supported (ringtrain's RoPE rotates halves, as "
                "transformers' Llama does)");
  const std::string act = f.string_or("hidden_act", "silu");
  if (act != "silu")
    refuse(dir, "config.json field 'hidden_act' = \"" + act + "\" is not supported; ringtrain's SwiGLU uses silu");
  // Dtype: transformers 4.x writes torch_dtype, 5.x dtype.
  info.dtype = f.string_or("dtype", f.string_or("torch_dtype", ""));
  if (!info.dtype.empty() && info.dtype != "bfloat16" && info.dtype != "float16" && info.dtype != "float32")
    refuse(dir, std::string("config.json field '") + (f.has("dtype") ? "dtype" : "torch_dtype") + "' = \"" + info.dtype +
                    "\" is not supported; ringtrain imports bfloat16, float16 and float32 weights");
  // Shape.
  ModelConfig& m = info.model;
  m.n_layer = checked_int(dir, "num_hidden_layers", f.integer("num_hidden_layers"));
  m.d_model = checked_int(dir, "hidden_size", f.integer("hidden_size"));
  m.n_head = checked_int(dir, "num_attention_heads", f.integer("num_attention_heads"));
  m.n_kv_head = checked_int(dir, "num_key_value_heads", f.integer_or("num_key_value_heads", m.n_head));
  m.vocab_size = checked_int(dir, "vocab_size", f.integer("vocab_size"));
  m.d_ff = checked_int(dir, "intermediate_size", f.integer("intermediate_size"));
  m.mlp = "swiglu";
  m.norm_eps = float(f.number_or("rms_norm_eps", 1e-6));
  if (!(m.norm_eps > 0) || !std::isfinite(m.norm_eps))
    refuse(dir, "config.json field 'rms_norm_eps' = " + f.value("rms_norm_eps") +
                    " must be a positive float32 (RMSNorm divides by sqrt(mean(x^2) + eps)); set it to the value the "
                    "model was trained with, e.g. 1e-5 or 1e-6 (transformers' Llama default)");
  m.tied_embeddings = f.boolean_or("tie_word_embeddings", false);
  if (m.d_model % m.n_head != 0)
    refuse(dir, "config.json field 'hidden_size' = " + std::to_string(m.d_model) + " is not divisible by "
                "'num_attention_heads' = " + std::to_string(m.n_head));
  if (f.has("head_dim") && f.integer("head_dim") != m.d_model / m.n_head)
    refuse(dir, "config.json field 'head_dim' = " + f.value("head_dim") + " differs from hidden_size / num_attention_heads = " +
                    std::to_string(m.d_model / m.n_head) + "; ringtrain supports head_dim = hidden_size / heads only");
  if (m.n_head % m.n_kv_head != 0)
    refuse(dir, "config.json field 'num_key_value_heads' = " + std::to_string(m.n_kv_head) +
                    " does not divide 'num_attention_heads' = " + std::to_string(m.n_head));
  if (f.has("partial_rotary_factor") && f.number("partial_rotary_factor") != 1.0)
    refuse(dir, "config.json field 'partial_rotary_factor' = " + f.value("partial_rotary_factor") + " is not supported");
  info.max_position_embeddings = f.integer_or("max_position_embeddings", 0);
  if (f.has("max_position_embeddings") && info.max_position_embeddings <= 0)
    refuse(dir, "config.json field 'max_position_embeddings' = " + f.value("max_position_embeddings") +
                    " must be > 0 (the context the model was trained at); set it to that context, e.g. 4096 for "
                    "Llama 2 (the model card names it)");
  // RoPE: 5.x rope_parameters (holding rope_theta), else 4.x rope_theta + rope_scaling.
  if (f.has("rope_parameters")) {
    const auto& rp = js["rope_parameters"];
    if (!rp.is_object()) refuse(dir, "config.json field 'rope_parameters' = " + rp.dump() + " is not an object");
    const Fields r{rp, dir, "config.json rope_parameters"};
    m.rope_base = float(r.number_or("rope_theta", f.number_or("rope_theta", 10000.0)));
    read_rope(rp, "config.json rope_parameters", info.max_position_embeddings, dir, m);
  } else {  // (4.x)
    m.rope_base = float(f.number_or("rope_theta", 10000.0));
    if (f.has("rope_scaling")) {
      const auto& rs = js["rope_scaling"];
      if (!rs.is_object()) refuse(dir, "config.json field 'rope_scaling' = " + rs.dump() + " is not an object");
      read_rope(rs, "config.json rope_scaling", info.max_position_embeddings, dir, m);
    }
  }
  if (!(m.rope_base > 1)) refuse(dir, "config.json rope_theta = " + json_text(m.rope_base) + " must be > 1");
  // A top-level original_max_position_embeddings takes priority for llama3 / yarn, as in transformers 5.x.
  if (f.has("original_max_position_embeddings") && (m.rope_scaling.type == "llama3" || m.rope_scaling.type == "yarn"))
    m.rope_scaling.original_max_position_embeddings =
        checked_int(dir, "original_max_position_embeddings", f.integer("original_max_position_embeddings"));
  return info;
}

std::vector<std::string> hf_weight_files(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::is_regular_file(index, ec)) {
    const nlohmann::json js = read_json_file(index, dir);
    if (!js.is_object() || !js.contains("weight_map") || !js["weight_map"].is_object())
      refuse(dir, "model.safetensors.index.json has no 'weight_map' object");
    std::set<std::string> files;
    for (auto it = js["weight_map"].begin(); it != js["weight_map"].end(); ++it) {
      if (!it.value().is_string()) refuse(dir, "model.safetensors.index.json: weight_map['" + it.key() + "'] is not a file name");
      files.insert(it.value().get<std::string>());
    }
    std::vector<std::string> out;
    for (const std::string& f : files) {
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        refuse(dir, "model.safetensors.index.json names the shard '" + f + "' outside the directory");
      if (!fs::is_regular_file(d / f, ec))
        refuse(dir, "model.safetensors.index.json names the shard '" + f + "', which is missing (incomplete download?)");
      out.push_back((d / f).string());
    }
    if (out.empty()) refuse(dir, "model.safetensors.index.json lists no shards");
    return out;
  }
  if (fs::is_regular_file(d / "model.safetensors", ec)) return {(d / "model.safetensors").string()};
  if (fs::is_regular_file(d / "pytorch_model.bin", ec) || fs::is_regular_file(d / "pytorch_model.bin.index.json", ec))
    refuse(dir, "holds PyTorch .bin weights only; ringtrain reads safetensors (re-save with "
                "model.save_pretrained(dir, safe_serialization=True))");
  refuse(dir, "has neither model.safetensors nor model.safetensors.index.json");
}

std::string hf_name_of(const std::string& name) {
  if (name == "tok_embeddings.weight") return "model.embed_tokens.weight";
  if (name == "norm.weight") return "model.norm.weight";
  if (name == "lm_head.weight") return "lm_head.weight";
  if (name.rfind("layers.", 0) == 0) {
    const size_t dot = name.find('.', 7);
    if (dot != std::string::npos) {
      const auto it = layer_names().find(name.substr(dot + 1));
      if (it != layer_names().end()) return "model." + name.substr(0, dot + 1) + it->second;
    }
  }
  throw Error("checkpoint tensor '" + name + "' has no Hugging Face Llama name (is this a SwiGLU model?)");
}

std::vector<HostTensor> read_hf_weights(const std::string& dir, const ModelConfig& model) {
  const std::vector<ParamEntry> table = build_param_table(model, 1, 0);
  std::map<std::string, const ParamEntry*> wanted;  // HF name -> entry
  for (const ParamEntry& e : table) wanted[hf_name_of(e.name)] = &e;
  std::map<std::string, HostTensor> found;          // ringtrain name -> tensor
  const std::vector<std::string> files = hf_weight_files(dir);
  uint64_t total = 0, done = 0;
  for (const std::string& file : files) total += uint64_t(fs::file_size(file));
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& file : files) {
    done += uint64_t(fs::file_size(file));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("import-hf: reading %s (%.2f of %.2f GB%s)\n", fs::path(file).filename().c_str(), double(done) / 1e9,
                double(total) / 1e9,
                done > 0 && s > 1 ? (", ETA " + std::to_string(int(s / double(done) * double(total - done))) + " s").c_str()
                                  : "");
    std::fflush(stdout);
    for (HostTensor& t : read_safetensors(file, nullptr, /*accept_half=*/true, /*header_only=*/false)) {
      const std::string hf = t.name;
      if (hf.size() >= 19 && hf.compare(hf.size() - 19, 19, "rotary_emb.inv_freq") == 0) continue;  // a buffer
      if (hf == "lm_head.weight" && model.tied_embeddings) continue;  // tied: the embedding is the head
      const auto it = wanted.find(hf);
      if (it == wanted.end())
        refuse(dir, "tensor '" + hf + "' in " + fs::path(file).filename().string() +
                        " is not part of a Llama model of this config (bias or extra module?)");
      const ParamEntry& e = *it->second;
      if (t.shape != e.full_shape) {
        std::ostringstream os;
        os << "tensor '" << hf << "' has shape [";
        for (size_t i = 0; i < t.shape.size(); ++i) os << (i ? ", " : "") << t.shape[i];
        os << "] but config.json implies [";
        for (size_t i = 0; i < e.full_shape.size(); ++i) os << (i ? ", " : "") << e.full_shape[i];
        os << "]";
        refuse(dir, os.str());
      }
      if (found.count(e.name)) refuse(dir, "tensor '" + hf + "' appears in two shards");
      refuse_non_finite(dir, file, hf, t.values);
      t.name = e.name;
      found[e.name] = std::move(t);
    }
  }
  std::vector<HostTensor> out;
  for (const ParamEntry& e : table) {
    auto it = found.find(e.name);
    if (it == found.end()) refuse(dir, "tensor '" + hf_name_of(e.name) + "' is missing from the weight files");
    out.push_back(std::move(it->second));
  }
  return out;
}

nlohmann::json hf_config_json(const ModelConfig& m, int64_t context, bool bf16, const nlohmann::json& source) {
  RT_CHECK(m.mlp == "swiglu", "export-hf writes LlamaForCausalLM, whose MLP is SwiGLU, but this checkpoint has "
                              "model.mlp=" << m.mlp << "; only SwiGLU models can be exported");
  const RopeScalingConfig& s = m.rope_scaling;
  nlohmann::json rope = {{"rope_type", s.type == "none" ? "default" : s.type}};
  if (s.type != "none") rope["factor"] = s.factor;
  if (s.type == "llama3") {
    rope["low_freq_factor"] = s.low_freq_factor;
    rope["high_freq_factor"] = s.high_freq_factor;
    rope["original_max_position_embeddings"] = s.original_max_position_embeddings;
  }
  if (s.type == "yarn") {
    rope["original_max_position_embeddings"] = s.original_max_position_embeddings;
    rope["beta_fast"] = s.beta_fast;
    rope["beta_slow"] = s.beta_slow;
    if (s.attention_factor > 0) rope["attention_factor"] = s.attention_factor;
  }
  nlohmann::json parameters = rope;
  parameters["rope_theta"] = double(m.rope_base);  // (rope_type, rope_theta, factor, ...)
  const char* dtype = bf16 ? "bfloat16" : "float32";
  nlohmann::json js = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", m.d_model},
      {"intermediate_size", m.d_ff},
      {"num_hidden_layers", m.n_layer},
      {"num_attention_heads", m.n_head},
      {"num_key_value_heads", m.n_kv_head},
      {"head_dim", m.head_dim()},
      {"vocab_size", m.vocab_size},
      {"rms_norm_eps", double(m.norm_eps)},
      {"tie_word_embeddings", m.tied_embeddings},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"mlp_bias", false},
      {"max_position_embeddings", context},
      {"initializer_range", 0.02},
      {"use_cache", true},
      // transformers 4.x reads rope_theta + rope_scaling, 5.x rope_parameters; 5.x also takes a non-null
      // rope_scaling as its rope_parameters, so both carry rope_theta and the same values.
      {"rope_theta", double(m.rope_base)},
      {"rope_scaling", s.type == "none" ? nlohmann::json() : parameters},
      {"rope_parameters", parameters},
      {"torch_dtype", dtype},                                       // 4.x
      {"dtype", dtype},                                             // 5.x
  };
  if (source.is_object())
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (source.contains(key)) js[key] = source[key];
  return js;
}

void write_hf_weights(const std::string& dir, const std::vector<HostTensor>& tensors, bool bf16, uint64_t shard_bytes) {
  const uint64_t elem = bf16 ? 2 : 4;
  std::vector<std::vector<const HostTensor*>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const HostTensor& t : tensors) {
    const uint64_t bytes = uint64_t(t.values.size()) * elem;
    if (in_shard > 0 && in_shard + bytes > shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(&t);
    in_shard += bytes;
    total += bytes;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  const size_t n = shards.size();
  for (size_t i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    std::vector<HostTensor> renamed;
    renamed.reserve(shards[i].size());
    for (const HostTensor* t : shards[i]) {
      renamed.push_back(HostTensor{hf_name_of(t->name), t->shape, t->values});
      weight_map[renamed.back().name] = name;
    }
    write_safetensors((fs::path(dir) / name).string(), renamed, {{"format", "pt"}}, bf16);
    std::printf("export-hf: wrote %s (%zu tensors)\n", name, renamed.size());
    std::fflush(stdout);
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_durably((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
}

}  // namespace rt
