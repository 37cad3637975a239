// `ringtrain eval --dump-logits FILE`: the logits of one eval batch, for comparisons with other frameworks
// (tests/hf/). Writes FILE as a NumPy .npy array (B, T, V) float32 and FILE.tokens.npy (B, T) int32, each
// through a temporary name and a rename: on any failure (a full disk) neither is left half-written.
// The logits are the final hidden state of the model's own forward times the fp32 LM-head weights, computed
// on the host in fp64 (so only the head's product is exact; the rest is the device's forward).
// One rank only (dp = cp = tp = 1): the tokens are then in sequence order.
#pragma once
#include <string>

#include "framework/base/output_files.h"
#include "framework/data/data.h"
#include "framework/model/model.h"

namespace rt {

// Writes FILE and FILE.tokens.npy to temporaries of `outputs` (renamed with the command's other outputs by its
// commit). One rank only: eval refuses --dump-logits on more at validation (a usage error).
void dump_logits(Model& model, const Batch& batch, int world_size, const std::string& file, OutputFiles& outputs);
// FILE.tokens.npy: the tokens beside the logits.
std::string dump_logits_tokens_path(const std::string& file);

// A .npy file (format 1.0, little-endian, C order) of float32 ("<f4") or int32 ("<i4") values.
void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
               size_t bytes);

}  // namespace rt
