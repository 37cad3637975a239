// Building blocks shared by the checkpoint writers (internal to framework/checkpoint*.cpp, safetensors.cpp):
// the save protocol split into its steps, the safetensors layout computed before any byte is written, and the
// per-tensor sums that each writer of a byte range computes for its own range.
#pragma once
#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/base/data_files.h"

namespace rt {

// ---- the save protocol (temporary directory, fsync, rename) ----
// lineage_dir is run_dir/checkpoints/<lineage> (framework/run/run_dir.h).
std::string checkpoint_temp_dir(const std::string& lineage_dir, int64_t step);
// Creates lineage_dir/.tmp_step_<N>/ (empty). Returns it.
std::string begin_checkpoint_save(const std::string& lineage_dir, int64_t step);
// Throws when RINGTRAIN_TEST_CRASH_IN_SAVE=1 (the crash test), naming what was written.
void crash_in_save_hook(const std::string& written);
// Writes state.json (with `files`: per file its bytes and checksum or tensor sums), fsyncs, renames the temporary
// directory to step_<N>, and rotates the lineage as save_checkpoint does (keep_last, keep_always, the newest that
// passed the divergence guard). Returns the final directory.
std::string finish_checkpoint_save(const std::string& lineage_dir, const TrainState& state, const nlohmann::json& files,
                                   int keep_last, const std::vector<std::string>& keep_always = {});
// Parses and checks state.json and the files' sizes; returns its "files" record.
nlohmann::json read_checkpoint_state(const std::string& dir, TrainState* state);

// ---- safetensors layout ----
struct SafetensorsEntry {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // absolute byte offsets in the file (layout: relative to the data start)
  std::string dtype = "F32";    // F32, or BF16 / F16 (read with accept_half; written by export-hf)
};
struct SafetensorsLayout {
  std::string header;  // the 8-byte length + the JSON header, padded to 8 bytes
  uint64_t data_start = 0, file_bytes = 0;
  std::vector<SafetensorsEntry> tensors;  // in the given order; begin/end relative to data_start
};
// F32 (or, with bf16, BF16) tensors back to back in the given order (the same bytes write_safetensors produces).
SafetensorsLayout make_safetensors_layout(const std::vector<std::string>& names,
                                          const std::vector<std::vector<int64_t>>& shapes,
                                          const std::map<std::string, std::string>& metadata, bool bf16 = false);
// The validated header of a mapped file, entries sorted by offset (absolute offsets). F32 only, unless
// accept_half (BF16 and F16 entries then come back with their dtype).
std::vector<SafetensorsEntry> read_safetensors_index(const MappedFile& file, std::map<std::string, std::string>* metadata,
                                                     bool accept_half = false);

// ---- per-tensor sums ----
// A tensor's sum is the sum, modulo 2^64, of a mixed hash of each f32 element's bits and its index in the
// tensor: any writer can add the terms of its own elements, in any order, and the partial sums add up to the
// tensor's (a flipped bit or a misplaced range changes it). Recorded as "rts64:<16 hex digits>".
uint64_t tensor_sum_terms(const float* values, int64_t count, int64_t first_index);
std::string tensor_sum_text(uint64_t sum);
// Checks a file written with tensor sums, reading every tensor (single-process load). Throws naming the tensor.
void verify_tensor_sums(const std::string& path, const nlohmann::json& record);

}  // namespace rt
