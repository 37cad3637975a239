// Where a model comes from when it does not start from random init (train.init_from, eval, export-hf):
// a ringtrain checkpoint directory (its model.safetensors __metadata__ holds the model config) or a Hugging
// Face model directory (config.json). The config merge itself is framework/checkpoint/model_source.h's, shared with eval
// and resume.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"

namespace rt {

struct ModelSource {
  std::string path;
  bool is_hf = false;              // a Hugging Face directory (else a ringtrain checkpoint)
  ModelConfig model;
  std::string hf_source;           // the HF directory the weights first came from ("" when none)
  int64_t context_length = 0;      // the context the weights were trained at (0 = unknown)
};

// Reads only configs and headers (no weights). Throws rt::Error naming the path and what is wrong.
ModelSource read_model_source(const std::string& path);
// All weights in ringtrain names, full fp32 tensors.
std::vector<HostTensor> load_source_weights(const ModelSource& source);

// The model config stored in a checkpoint's __metadata__ (model_metadata's keys). Keys absent from older
// checkpoints keep their defaults.
ModelConfig model_config_from_metadata(const std::map<std::string, std::string>& metadata, const std::string& origin);

// train.init_from: the model section comes from the source. A model.* key the config sets explicitly must
// agree with the source (rt::Error naming the key and both values), except model.rope_base and
// model.rope_scaling.*, which may override it (context extension); each override is added to config.notes
// with both values. Called by parse_config_text before validation.
void apply_init_from_model(Config& config);

}  // namespace rt
