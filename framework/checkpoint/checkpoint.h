// Checkpoints (DESIGN.md "Checkpoints"): one directory per save with model.safetensors (full, unsharded
// fp32), optimizer.safetensors and state.json; written to a temporary directory, fsynced, renamed.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/base/host_tensor.h"

namespace rt {


constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";

struct TrainState {
  int64_t step = 0;
  uint64_t data_cursor = 0;     // the loader's position
  std::string rng_state;        // serialised RNG(s)
  std::string config_hash;
  std::string lineage;          // the lineage that wrote it (framework/run/run_dir.h); "" in older checkpoints
  std::string parent;           // the checkpoint its lineage was resumed from ("" for a fresh start)
  std::map<std::string, std::string> config;  // the resolved config, dotted path -> text ("" when absent)
  bool guard_passed = true;     // the divergence guard checked the state before the save
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
// The __metadata__ of model.safetensors (model_metadata + extra, e.g. context_length and hf_source, + format: pt)
// and of optimizer.safetensors (step).
std::map<std::string, std::string> model_file_metadata(const ModelConfig& model,
                                                       const std::map<std::string, std::string>& extra = {});
std::map<std::string, std::string> optimizer_file_metadata(int64_t step);

// Writes <lineage_dir>/step_<N>/ atomically (lineage_dir is run_dir/checkpoints/<lineage>). Rotation keeps the
// newest `keep_last` of lineage_dir only, and never removes the one just written, a directory listed in
// `keep_always` (the checkpoint resumed from), nor the newest one whose state passed the divergence guard.
// extra_metadata joins the model config in model.safetensors' __metadata__ (e.g. context_length, hf_source).
// Returns the directory. Test hook: RINGTRAIN_TEST_SAVE_DELAY_S=s sleeps s seconds before the rename.
std::string save_checkpoint(const std::string& lineage_dir, const std::vector<HostTensor>& model,
                            const std::vector<HostTensor>& optimizer, const TrainState& state,
                            const ModelConfig& model_config, int keep_last,
                            const std::map<std::string, std::string>& extra_metadata = {},
                            const std::vector<std::string>& keep_always = {});
// A checkpoint of weights only (no optimizer.safetensors; state.json records none), written into `dir`
// itself through a temporary sibling and a rename (ringtrain import-hf). `dir` must not exist yet, unless
// `replace` (import-hf --overwrite): then an existing directory is replaced once the new one is complete.
void save_weights_checkpoint(const std::string& dir, const std::vector<HostTensor>& model, const TrainState& state,
                             const std::map<std::string, std::string>& metadata, bool replace = false);
struct LoadedCheckpoint {
  std::vector<HostTensor> model, optimizer;  // optimizer empty for a weights-only checkpoint
  TrainState state;
  std::map<std::string, std::string> metadata;  // model.safetensors' __metadata__
};
// Validates every file (and a checksum recorded in state.json) before returning; throws on corruption.
LoadedCheckpoint load_checkpoint(const std::string& dir);
// Only the weights, for eval: `path` is a checkpoint directory (model.safetensors checked against state.json
// when there is one; optimizer.safetensors is not needed) or a .safetensors file. metadata: its __metadata__.
std::vector<HostTensor> load_model_weights(const std::string& path, std::map<std::string, std::string>* metadata);
// state.json of a checkpoint directory, without reading the tensors. Throws on a missing or bad file.
TrainState read_checkpoint_state(const std::string& dir);
// The newest complete checkpoint directory (step_<N> with state.json) in lineage_dir, or "" if none.
std::string latest_checkpoint(const std::string& lineage_dir);
// Every complete checkpoint directory in lineage_dir, oldest first.
std::vector<std::string> list_checkpoints(const std::string& lineage_dir);

}  // namespace rt
