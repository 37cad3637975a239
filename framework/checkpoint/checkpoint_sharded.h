// Checkpoints written and read range by range (DESIGN.md "Checkpoints"): the files are the same unsharded
// safetensors as ever, but no rank assembles a full tensor. The layout is known up front, so world rank 0
// writes the headers and sizes the files, and every rank then writes its own byte ranges (Model::writer_pieces:
// each element of each full tensor exactly once over the world), staged through a bounded host buffer, and
// adds the per-tensor sums of its ranges; the sums are added over the world and recorded in state.json. A load
// reads only the ranges this rank holds (any grid, any ZeRO stage) and checks every tensor's sum the same way.
// The temporary-directory, fsync and rename protocol is save_checkpoint's. The files must be on a file system
// every rank sees (one node, or a shared one).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "framework/checkpoint/checkpoint.h"
#include "framework/model/model.h"
#include "framework/model/optimizer.h"
#include "parallel/comm/comm.h"

namespace rt {

// Collective over `world` (every rank of the model's grid). Returns lineage_dir/step_<N> (lineage_dir is
// run_dir/checkpoints/<lineage>; rotation as save_checkpoint's, keep_always included). extra_metadata joins the
// model config in model.safetensors' __metadata__ (context_length, hf_source).
std::string save_checkpoint_sharded(const std::string& lineage_dir, Model& model, AdamW& optimizer,
                                    const TrainState& state, int keep_last, Comm& world,
                                    const std::map<std::string, std::string>& extra_metadata = {},
                                    const std::vector<std::string>& keep_always = {});
// Fills the model's masters (and compute weights) and, when given, the optimizer's moments; a weights-only
// checkpoint (import-hf: no optimizer.safetensors) zeroes the optimizer instead. model_metadata, when given,
// receives model.safetensors' __metadata__. Collective over `world`. Throws naming the file and tensor on a
// missing tensor, a wrong shape or a bad sum.
TrainState load_checkpoint_sharded(const std::string& dir, Model& model, AdamW* optimizer, Comm& world,
                                   std::map<std::string, std::string>* model_metadata = nullptr);

}  // namespace rt
