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
  std::string lineage;          // the lineage that wrote it (framework/run_dir.h); "" in older checkpoints
  std::string parent;           // the checkpoint its lineage was resumed from ("" for a fresh start)
  std::map<std::string, std::string> config;  // the resolved config, dotted path -> text ("" when absent)
  bool guard_passed = true;     // the divergence guard checked the state before the save
};

// safetensors files: `metadata` goes to __metadata__ (strings only). Tensors are F32.
void write_safetensors(const std::string& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);
// Throws rt::Error naming the file and the problem on any corruption (bad header, sizes, truncation).
std::vector<HostTensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata);

// The model config as __metadata__ strings (n_layer, d_model, ..., tied_embeddings).
std::map<std::string, std::string> model_metadata(const ModelConfig& model);

// Writes <lineage_dir>/step_<N>/ atomically (lineage_dir is run_dir/checkpoints/<lineage>). Rotation keeps the
// newest `keep_last` of lineage_dir only, and never removes the one just written, a directory listed in
// `keep_always` (the checkpoint resumed from), nor the newest one whose state passed the divergence guard.
// Returns the directory. Test hook: RINGTRAIN_TEST_SAVE_DELAY_S=s sleeps s seconds before the rename.
std::string save_checkpoint(const std::string& lineage_dir, const std::vector<HostTensor>& model,
                            const std::vector<HostTensor>& optimizer, const TrainState& state,
                            const ModelConfig& model_config, int keep_last,
                            const std::vector<std::string>& keep_always = {});
struct LoadedCheckpoint {
  std::vector<HostTensor> model, optimizer;
  TrainState state;
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
