// The list of config fields and typed conversion between text and values.
#include "framework/config/config_schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

namespace rt {

#define RT_FIELD(sec, key, type, help) \
  FieldSpec{#sec, #key, FieldType::type, [](Config& c) -> void* { return &c.sec.key; }, help}

#define RT_SUBFIELD(sec, group, key, type, help)                                                          \
  FieldSpec{#sec, #group "." #key, FieldType::type, [](Config& c) -> void* { return &c.sec.group.key; }, help}

const std::vector<FieldSpec>& config_fields() {
  static const std::vector<FieldSpec> fields = {
      RT_FIELD(model, n_layer, i32, "transformer blocks"),
      RT_FIELD(model, d_model, i32, "residual width"),
      RT_FIELD(model, n_head, i32, "query heads"),
      RT_FIELD(model, n_kv_head, i32, "key/value heads (GQA when < n_head)"),
      RT_FIELD(model, vocab_size, i32, "vocabulary size"),
      RT_FIELD(model, mlp, string, "gelu | swiglu"),
      RT_FIELD(model, d_ff, i32, "MLP hidden width"),
      RT_FIELD(model, rope_base, f32, "RoPE frequency base"),
      RT_FIELD(model, norm_eps, f32, "RMSNorm epsilon"),
      RT_FIELD(model, tied_embeddings, boolean, "LM head shares the embedding"),
      RT_SUBFIELD(model, rope_scaling, type, string, "RoPE scaling: none | linear | llama3 | yarn"),
      RT_SUBFIELD(model, rope_scaling, factor, f64, "context extension factor (linear, llama3, yarn)"),
      RT_SUBFIELD(model, rope_scaling, low_freq_factor, f64, "llama3: low-frequency factor"),
      RT_SUBFIELD(model, rope_scaling, high_freq_factor, f64, "llama3: high-frequency factor"),
      RT_SUBFIELD(model, rope_scaling, original_max_position_embeddings, i32,
                  "llama3, yarn: the context the model was pretrained at"),
      RT_SUBFIELD(model, rope_scaling, beta_fast, f64, "yarn: extrapolation boundary (rotations)"),
      RT_SUBFIELD(model, rope_scaling, beta_slow, f64, "yarn: interpolation boundary (rotations)"),
      RT_SUBFIELD(model, rope_scaling, attention_factor, f64,
                  "yarn: multiplies cos and sin (0 = 0.1 ln(factor) + 1)"),
      RT_FIELD(data, source, string, "copy | bytes | shards"),
      RT_FIELD(data, path, string, "bytes: text file; shards: file or glob"),
      RT_FIELD(data, eval_path, string, "held-out file/glob (empty: tail of path)"),
      RT_FIELD(data, seq_len, i32, "global context length T"),
      RT_FIELD(data, copy_span, i32, "copy task span (0 = (seq_len-1)/2)"),
      RT_FIELD(data, documents, string, "none | eot: packed documents, masked so no token attends across one"),
      RT_FIELD(data, eot_token, i32, "token at each document's start (-1: meta.json's, else 50256)"),
      RT_FIELD(data, positions, string, "global | document: RoPE positions restart at each document"),
      RT_FIELD(data, seed, u64, "data seed"),
      RT_FIELD(parallel, dp, i32, "data-parallel replicas"),
      RT_FIELD(parallel, cp, i32, "context-parallel ranks (ring)"),
      RT_FIELD(parallel, cp_a2a, i32_or_auto,
               "all-to-all degree u: divides cp; the ring runs over cp / u (1 = ring only; auto = least predicted time)"),
      RT_FIELD(parallel, tp, i32, "tensor-parallel ranks"),
      RT_FIELD(parallel, layout, string, "auto | contiguous | zigzag | striped | balanced (documents)"),
      RT_FIELD(parallel, comm, string, "auto | mpi | nccl"),
      RT_FIELD(parallel, dkv_wire, string, "ring dK/dV accumulator on the wire: fp32 | bf16"),
      RT_FIELD(parallel, cp_scheme, cp_scheme,
               "packed documents over the ring: ring | gather (only the key rows queries see) | auto (per batch)"),
      RT_FIELD(parallel, zero, i32, "ZeRO stage over dp x cp: 0 | 1 (optimizer) | 2 (+ gradients) | 3 (+ weights)"),
      RT_FIELD(parallel, timeout_s, f64, "watchdog: seconds a rank may wait in a collective (exit 4)"),
      RT_FIELD(parallel, save_timeout_s, f64, "watchdog while a checkpoint is written"),
      RT_FIELD(train, batch_size, i32, "global sequences per step"),
      RT_FIELD(train, steps, i32, "optimizer steps"),
      RT_FIELD(train, eval_every, i32, "steps between evals (0 = never)"),
      RT_FIELD(train, eval_batches, i32, "0 = every seq_len window of the held-out split, in order; N = the first N x batch_size"),
      RT_FIELD(train, checkpointing, string, "activations: none | full | selective"),
      RT_FIELD(train, lm_head_chunk, i32, "tokens per LM-head chunk"),
      RT_FIELD(train, mlp_chunk, i32, "tokens per MLP chunk: -1 auto (only when tokens x d_ff > 2^27), 0 none"),
      RT_FIELD(train, deterministic_attention, boolean,
               "attention backward with the same bits on every run (ordered dQ adds; slower, see bench/NOTES.md)"),
      RT_FIELD(train, offload, string, "activation offload to pinned host memory (CUDA): none | activations"),
      RT_FIELD(train, offload_layers, string, "layers whose block inputs are offloaded: auto (fewest that fit) | N"),
      RT_FIELD(train, seed, u64, "init seed"),
      RT_FIELD(train, run_dir, string, "output directory"),
      RT_FIELD(train, init_from, string, "start from a ringtrain checkpoint or HF model dir (\"\" = random init)"),
      RT_FIELD(train, overwrite, boolean, "fresh run into a run_dir with checkpoints: delete them"),
      RT_FIELD(train, divergence_factor, f64, "diverged when loss > factor x running mean (0 = off)"),
      RT_FIELD(train, on_divergence, string, "non-finite loss/grad norm: stop (exit 3) | skip_step"),
      RT_FIELD(train, precision, string, "linear-layer GEMMs: bf16 | fp8 (E4M3, scaled per fp8.recipe)"),
      RT_FIELD(fp8, recipe, string, "precision fp8: tensorwise | rowwise | block (1x128 acts, 128x128 weights)"),
      RT_FIELD(fp8, bf16_first_last, boolean, "precision fp8: first and last blocks keep bf16 GEMMs"),
      RT_FIELD(fp8, attention, boolean,
               "precision fp8: attention backward's dV, dQ, dK on E4M3 operands (CPU: head dim 64 / 128; GPU: "
               "sm_90a, head dim 128, seq_len / cp a multiple of 128, no packed documents)"),
      RT_FIELD(fp8, attention_kv, string,
               "fp8.attention: K/V between cp ranks in bf16 | e4m3 (rounded once per layer, a factor per 128-row "
               "block and head; half the ring's K/V bytes; ring scheme only)"),
      RT_FIELD(fp8, zero3_gather, string,
               "parallel.zero 3: the FP8 blocks' weight all-gather in bf16 | fp8 (E4M3 + a factor per matrix)"),
      RT_FIELD(optim, lr, f32, "peak learning rate"),
      RT_FIELD(optim, min_lr, f32, "final learning rate (cosine)"),
      RT_FIELD(optim, warmup_steps, i32, "linear warm-up steps"),
      RT_FIELD(optim, beta1, f32, "AdamW beta1"),
      RT_FIELD(optim, beta2, f32, "AdamW beta2"),
      RT_FIELD(optim, eps, f32, "AdamW epsilon"),
      RT_FIELD(optim, weight_decay, f32, "decoupled weight decay"),
      RT_FIELD(optim, grad_clip, f32, "global grad-norm clip (0 = off)"),
      RT_FIELD(checkpoint, every, i32, "steps between saves (0 = end only)"),
      RT_FIELD(checkpoint, keep_last, i32, "checkpoints kept"),
      RT_FIELD(checkpoint, save_final, boolean, "save at the last step"),
      RT_FIELD(checkpoint, resume, string, "\"\" | auto | a checkpoint dir"),
      RT_FIELD(log, every, i32, "steps between log lines"),
      RT_FIELD(log, metrics_file, string, "JSONL file inside run_dir"),
      RT_FIELD(log, peak_tflops, f64, "MFU peak (0 = GPU table)"),
      RT_FIELD(log, tensorboard, boolean, "TensorBoard event files in run_dir/tensorboard (rank 0)"),
      FieldSpec{"", "device", FieldType::string, [](Config& c) -> void* { return &c.device; },
                "auto | cpu | cuda"},
  };
  return fields;
}
#undef RT_FIELD
#undef RT_SUBFIELD

const std::vector<std::string>& config_sections() {
  static const std::vector<std::string> sections = {"model", "data",       "parallel", "train",
                                                    "fp8",   "optim",    "checkpoint", "log"};
  return sections;
}

const FieldSpec* find_field(const std::string& path) {
  for (const FieldSpec& f : config_fields())
    if (f.path() == path) return &f;
  return nullptr;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string last_component(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

template <class Int>
bool parse_int(const std::string& text, Int* out) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, *out);
  return ec == std::errc() && ptr == end && begin != end;
}

bool parse_double(const std::string& text, double* out) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, *out);
  return ec == std::errc() && ptr == end && begin != end && std::isfinite(*out);
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

std::string did_you_mean(const std::string& path) {
  // Prefer the same key in another section (train.lr -> optim.lr), then the closest full path.
  const std::string key = last_component(path);
  for (const FieldSpec& f : config_fields())
    if (key == f.name && f.path() != path) return "(did you mean '" + f.path() + "'?)";
  const FieldSpec* best = nullptr;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const FieldSpec& f : config_fields()) {
    size_t d = edit_distance(path, f.path());
    if (d < best_distance) best_distance = d, best = &f;
  }
  size_t allowed = std::max<size_t>(2, path.size() / 4);
  if (best && best_distance <= allowed) return "(did you mean '" + best->path() + "'?)";
  return "";
}

const char* field_type_name(FieldType type) {
  switch (type) {
    case FieldType::i32: return "an integer";
    case FieldType::u64: return "a non-negative integer";
    case FieldType::f32:
    case FieldType::f64: return "a number";
    case FieldType::boolean: return "true or false";
    case FieldType::string: return "a string";
    case FieldType::i32_or_auto: return "auto or a whole number >= 1";
    case FieldType::cp_scheme: return "ring, gather or auto";
  }
  return "?";
}

bool set_field(Config& config, const FieldSpec& field, const std::string& text, std::string* error) {
  void* where = field.address(config);
  auto bad = [&](const std::string& why) {
    std::string message = "'";
    message += field.path();
    message += "' must be ";
    message += field_type_name(field.type);
    message += ", got '" + text + "'" + why;
    *error = message;
    return false;
  };
  switch (field.type) {
    case FieldType::i32: {
      int64_t v = 0;
      if (!parse_int(text, &v)) {
        double d = 0;
        if (parse_double(text, &d)) return bad(" (write a whole number without a decimal point or exponent)");
        return bad("");
      }
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        return bad(" (out of the 32-bit range)");
      *static_cast<int*>(where) = int(v);
      return true;
    }
    case FieldType::i32_or_auto: {  // "auto" is 0, which no number may spell
      if (lower(text) == "auto") {
        *static_cast<int*>(where) = 0;
        return true;
      }
      int64_t v = 0;
      if (!parse_int(text, &v)) return bad("");
      if (v < 1 || v > std::numeric_limits<int32_t>::max()) return bad(" (write auto, or 1 for the ring alone)");
      *static_cast<int*>(where) = int(v);
      return true;
    }
    case FieldType::u64: {
      uint64_t v = 0;
      if (!text.empty() && text[0] == '-') return bad(" (negative)");
      if (!parse_int(text, &v)) return bad("");
      *static_cast<uint64_t*>(where) = v;
      return true;
    }
    case FieldType::f32:
    case FieldType::f64: {
      double v = 0;
      if (!parse_double(text, &v)) return bad("");
      if (field.type == FieldType::f32) {
        if (std::fabs(v) > double(std::numeric_limits<float>::max())) return bad(" (out of float range)");
        *static_cast<float*>(where) = float(v);
      } else {
        *static_cast<double*>(where) = v;
      }
      return true;
    }
    case FieldType::boolean: {
      std::string t = lower(text);
      if (t == "true" || t == "yes" || t == "on") *static_cast<bool*>(where) = true;
      else if (t == "false" || t == "no" || t == "off") *static_cast<bool*>(where) = false;
      else return bad("");
      return true;
    }
    case FieldType::string:
      *static_cast<std::string*>(where) = text;
      return true;
    case FieldType::cp_scheme: {  // the enum is read here; the message is the one a string choice gets
      for (CpSchemeSetting s : {CpSchemeSetting::ring, CpSchemeSetting::gather, CpSchemeSetting::automatic})
        if (text == cp_scheme_setting_name(s)) {
          *static_cast<CpSchemeSetting*>(where) = s;
          return true;
        }
      *error = field.path() + "='" + text + "' is not a valid choice; use one of: ring, gather, auto";
      return false;
    }
  }
  return bad("");
}

std::string field_text(const Config& config, const FieldSpec& field) {
  const void* where = field.address(const_cast<Config&>(config));
  char buf[64];
  switch (field.type) {
    case FieldType::i32: return std::to_string(*static_cast<const int*>(where));
    case FieldType::i32_or_auto: {
      const int v = *static_cast<const int*>(where);
      return v == 0 ? "auto" : std::to_string(v);
    }
    case FieldType::u64: return std::to_string(*static_cast<const uint64_t*>(where));
    case FieldType::f32: {
      auto r = std::to_chars(buf, buf + sizeof buf, *static_cast<const float*>(where));
      return std::string(buf, r.ptr);
    }
    case FieldType::f64: {
      auto r = std::to_chars(buf, buf + sizeof buf, *static_cast<const double*>(where));
      return std::string(buf, r.ptr);
    }
    case FieldType::boolean: return *static_cast<const bool*>(where) ? "true" : "false";
    case FieldType::string: return *static_cast<const std::string*>(where);
    case FieldType::cp_scheme: return cp_scheme_setting_name(*static_cast<const CpSchemeSetting*>(where));
  }
  return "";
}

}  // namespace rt
