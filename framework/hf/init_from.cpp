// Model sources and the init_from config merge (framework/hf/init_from.h).
#include "framework/hf/init_from.h"

#include <charconv>
#include <filesystem>

#include "framework/config/config_schema.h"
#include "framework/hf/hf_format.h"
#include "framework/checkpoint/model_source.h"
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
  Config source;
  source.model = read_model_source(from).model;
  const ModelSourceReport report = apply_model_from_source(
      config, model_fields_as_metadata(source), "train.init_from source", "'" + from + "'",
      {"model.rope_base", "model.rope_scaling."});  // context extension
  config.notes.insert(config.notes.end(), report.overridden.begin(), report.overridden.end());
}

}  // namespace rt
