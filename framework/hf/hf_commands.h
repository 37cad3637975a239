// ringtrain import-hf / export-hf (framework/hf/hf_format.h has the file formats).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace rt {

// Both commands refuse bad input (a bad --out or option, an unsupported or damaged model or checkpoint) with an
// rt::RunError of code 2 before writing anything; out_dir is normalised first ("X/" is "X"; "" is refused).
// An error while writing (a full disk) is an rt::RunError of code 2 too, and leaves nothing behind.
// Reads a Hugging Face Llama/Mistral directory and writes a weights-only ringtrain checkpoint (step 0, no
// optimizer state) into out_dir, which must not exist (overwrite, --overwrite: an existing directory is replaced
// once the new one is complete). device: auto | cpu | cuda, the device the model will train on (on CUDA only head
// dims 64 and 128 run).
int import_hf_main(const std::string& hf_dir, const std::string& out_dir, const std::string& device,
                   bool overwrite = false);
// Writes a ringtrain checkpoint as a Hugging Face LlamaForCausalLM directory (config.json, safetensors shards
// of at most shard_bytes + index, the source's tokenizer and generation_config files) into out_dir, which must
// not exist (overwrite, --overwrite: an existing directory is replaced once the new one is complete). dtype:
// bf16 | fp32. max_positions: max_position_embeddings, > 0 (absent = the context the checkpoint was trained at,
// from its metadata).
int export_hf_main(const std::string& checkpoint_dir, const std::string& out_dir, const std::string& dtype,
                   uint64_t shard_bytes, std::optional<int64_t> max_positions, bool overwrite = false);

}  // namespace rt
