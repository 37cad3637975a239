// Model sources and the init_from config merge (framework/init_from.h).
#include "framework/init_from.h"

#include <charconv>
#include <filesystem>

#include "framework/config_schema.h"
#include "framework/hf_format.h"
#include "kernels/tensor.h"

namespace fs = std::filesystem;

namespace rt {

ModelConfig model_config_from_metadata(const std::map<std::string, std::string>& metadata, const std::string& origin) {
  Config c;
  for (const FieldSpec& f : config_fields()) {
    if (std::string(f.section) != "model") continue;
    const auto it = metadata.find(f.name);
    if (it == metadata.end()) {
      if (f.path().rfind("model.rope_scaling.", 0) == 0) continue;  // checkpoints from before RoPE scaling
      throw Error("checkpoint '" + origin + "': model.safetensors __metadata__ lacks '" + f.name +
                  "', so the model config cannot be rebuilt; is this a ringtrain checkpoint?");
    }
    std::string error;
    if (!set_field(c, f, it->second, &error))
      throw Error("checkpoint '" + origin + "': model.safetensors __metadata__: " + error);
  }
  return c.model;
}

ModelSource read_model_source(const std::string& path) {
  ModelSource s;
  s.path = path;
  std::error_code ec;
  const fs::path dir(path);
  if (!fs::is_directory(dir, ec))
    throw Error("train.init_from / model source '" + path + "' is not a directory; give a ringtrain checkpoint "
                "directory or a Hugging Face model directory");
  if (fs::is_regular_file(dir / "state.json", ec) && fs::is_regular_file(dir / "model.safetensors", ec)) {
    std::map<std::string, std::string> meta;
    read_safetensors((dir / "model.safetensors").string(), &meta, false, /*header_only=*/true);
    s.model = model_config_from_metadata(meta, path);
    if (auto it = meta.find("hf_source"); it != meta.end()) s.hf_source = it->second;
    if (auto it = meta.find("context_length"); it != meta.end()) s.context_length = std::atoll(it->second.c_str());
    return s;
  }
  if (is_hf_model_dir(path)) {
    const HfModelInfo info = read_hf_config(path);
    s.is_hf = true;
    s.model = info.model;
    s.hf_source = fs::absolute(dir, ec).lexically_normal().string();
    s.context_length = info.max_position_embeddings;
    return s;
  }
  throw Error("'" + path + "' is neither a ringtrain checkpoint (state.json + model.safetensors) nor a Hugging Face "
              "model directory (config.json)");
}

std::vector<HostTensor> load_source_weights(const ModelSource& source) {
  if (source.is_hf) return read_hf_weights(source.path, source.model);
  return load_checkpoint(source.path).model;
}

void apply_init_from_model(Config& config) {
  const std::string& from = config.train.init_from;
  const ModelSource source = read_model_source(from);
  Config src;
  src.model = source.model;
  std::vector<std::string> conflicts;
  for (const FieldSpec& f : config_fields()) {
    if (std::string(f.section) != "model") continue;
    const std::string key = f.path();
    const std::string theirs = field_text(src, f);
    if (!config.is_explicit(key)) {
      std::string error;
      RT_CHECK(set_field(config, f, theirs, &error), error);
      continue;
    }
    const std::string ours = field_text(config, f);
    if (ours == theirs) continue;
    const bool may_override = key == "model.rope_base" || key.rfind("model.rope_scaling.", 0) == 0;
    if (may_override)
      config.notes.push_back(key + ": " + ours + " (config) overrides " + theirs + " (train.init_from " + from + ")");
    else
      conflicts.push_back(key + "=" + ours + " in the config, but train.init_from '" + from + "' has " + theirs +
                          "; delete " + key + " from the config (the model section comes from the source)");
  }
  if (conflicts.size() == 1) throw Error(conflicts[0]);
  if (!conflicts.empty()) {
    std::string all = std::to_string(conflicts.size()) + " model keys disagree with train.init_from:";
    for (const std::string& c : conflicts) all += "\n  - " + c;
    throw Error(all);
  }
}

}  // namespace rt
