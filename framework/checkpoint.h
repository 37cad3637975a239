// Checkpoints (DESIGN.md "Checkpoints"): one directory per save with model.safetensors (full, unsharded
// fp32), optimizer.safetensors and state.json; written to a temporary directory, fsynced, renamed.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/config.h"

namespace rt {

// A full (unsharded) fp32 host tensor with its checkpoint name, e.g. "layers.0.attn.wq.weight".
struct HostTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";

struct TrainState {
  int64_t step = 0;
  uint64_t data_cursor = 0;     // the loader's position
  std::string rng_state;        // serialised RNG(s)
  std::string config_hash;
};

// safetensors files: `metadata` goes to __metadata__ (strings only). Tensors are F32.
void write_safetensors(const std::string& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);
// Throws rt::Error naming the file and the problem on any corruption (bad header, sizes, truncation).
std::vector<HostTensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata);

// The model config as __metadata__ strings (n_layer, d_model, ..., tied_embeddings).
std::map<std::string, std::string> model_metadata(const ModelConfig& model);
// The __metadata__ of model.safetensors (model_metadata + format: pt) and of optimizer.safetensors (step).
std::map<std::string, std::string> model_file_metadata(const ModelConfig& model);
std::map<std::string, std::string> optimizer_file_metadata(int64_t step);

// Writes run_dir/checkpoints/step_<N>/ atomically; keeps the last `keep_last`. Returns the directory.
std::string save_checkpoint(const std::string& run_dir, const std::vector<HostTensor>& model,
                            const std::vector<HostTensor>& optimizer, const TrainState& state,
                            const ModelConfig& model_config, int keep_last);
struct LoadedCheckpoint {
  std::vector<HostTensor> model, optimizer;
  TrainState state;
};
// Validates every file (and a checksum recorded in state.json) before returning; throws on corruption.
LoadedCheckpoint load_checkpoint(const std::string& dir);
// The newest complete checkpoint directory under run_dir, or "" if none.
std::string latest_checkpoint(const std::string& run_dir);

}  // namespace rt
