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

struct TrainState {
  int64_t step = 0;
  uint64_t data_cursor = 0;     // the loader's position
  std::string rng_state;        // serialised RNG(s)
  std::string config_hash;
};

// safetensors files: `metadata` goes to __metadata__ (strings only). Tensors are F32, or BF16 (rounded to
// nearest even) when bf16.
void write_safetensors(const std::string& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);
void write_safetensors(const std::string& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, bool bf16);
// Throws rt::Error naming the file and the problem on any corruption (bad header, sizes, truncation).
// F32 tensors only, unless accept_half (BF16 and F16 are widened to fp32 exactly). header_only: names and
// shapes, no values.
std::vector<HostTensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata);
std::vector<HostTensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata,
                                         bool accept_half, bool header_only);

// The model config as __metadata__ strings (n_layer, d_model, ..., tied_embeddings).
std::map<std::string, std::string> model_metadata(const ModelConfig& model);

// Writes run_dir/checkpoints/step_<N>/ atomically; keeps the last `keep_last`. Returns the directory.
// extra_metadata joins the model config in model.safetensors' __metadata__ (e.g. context_length, hf_source).
std::string save_checkpoint(const std::string& run_dir, const std::vector<HostTensor>& model,
                            const std::vector<HostTensor>& optimizer, const TrainState& state,
                            const ModelConfig& model_config, int keep_last,
                            const std::map<std::string, std::string>& extra_metadata = {});
// A checkpoint of weights only (no optimizer.safetensors; state.json records none), written into `dir`
// itself through a temporary sibling and a rename (ringtrain import-hf). `dir` must not exist yet.
void save_weights_checkpoint(const std::string& dir, const std::vector<HostTensor>& model, const TrainState& state,
                             const std::map<std::string, std::string>& metadata);
struct LoadedCheckpoint {
  std::vector<HostTensor> model, optimizer;  // optimizer empty for a weights-only checkpoint
  TrainState state;
  std::map<std::string, std::string> metadata;  // model.safetensors' __metadata__
};
// Validates every file (and a checksum recorded in state.json) before returning; throws on corruption.
LoadedCheckpoint load_checkpoint(const std::string& dir);
// The newest complete checkpoint directory under run_dir, or "" if none.
std::string latest_checkpoint(const std::string& run_dir);

}  // namespace rt
