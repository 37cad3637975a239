// Hugging Face Llama-family model directories (DESIGN.md "Hugging Face import and export"):
//   config.json (transformers 4.x: rope_theta + rope_scaling; 5.x: rope_parameters), and model.safetensors or
//   shards listed by model.safetensors.index.json, in BF16, F16 or F32.
// Supported: LlamaForCausalLM and MistralForCausalLM without a sliding window (GQA, tied or untied
// embeddings, rms_norm_eps, head_dim = hidden_size / num_attention_heads, SwiGLU with hidden_act silu).
// Everything else is refused with an rt::Error naming the field and its value.
// Q/K layout: transformers' Llama applies RoPE in the "rotate half" form to q_proj / k_proj outputs viewed as
// (heads, head_dim), which is ringtrain's convention, so the weights are copied without a permutation.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"

namespace rt {

struct HfModelInfo {
  ModelConfig model;
  std::string architecture;             // LlamaForCausalLM | MistralForCausalLM
  std::string dtype;                    // bfloat16 | float16 | float32 (config's torch_dtype / dtype), or ""
  int64_t max_position_embeddings = 0;  // the source's context
  nlohmann::json raw;                   // the whole config.json (token ids are carried into an export)
};

// Reads and checks <dir>/config.json. Throws rt::Error naming the field and value of anything unsupported.
HfModelInfo read_hf_config(const std::string& dir);
// True when `dir` holds a config.json (an HF model directory).
bool is_hf_model_dir(const std::string& dir);

// The weight files of an HF directory: model.safetensors, or the shards named by model.safetensors.index.json.
std::vector<std::string> hf_weight_files(const std::string& dir);
// All weights, widened to fp32 and renamed to ringtrain's checkpoint names, checked against `model`'s
// parameter table (names and shapes). Unknown tensors are refused; rotary_emb.inv_freq buffers, and lm_head
// when the embeddings are tied, are skipped.
std::vector<HostTensor> read_hf_weights(const std::string& dir, const ModelConfig& model);

// ringtrain checkpoint name -> Hugging Face name (e.g. layers.0.attn.wq.weight ->
// model.layers.0.self_attn.q_proj.weight). Throws on a name outside the Llama layout.
std::string hf_name_of(const std::string& ringtrain_name);

// config.json for an export: LlamaForCausalLM with max_position_embeddings = context and the RoPE fields in
// both styles (rope_theta + rope_scaling for 4.x, rope_parameters for 5.x). source_config: the config.json of
// the model the checkpoint came from (its token ids are carried over), or null.
nlohmann::json hf_config_json(const ModelConfig& model, int64_t context, bool bf16, const nlohmann::json& source_config);

// Writes the tensors (ringtrain names) as HF shards model-0000i-of-0000n.safetensors of at most shard_bytes
// each, plus model.safetensors.index.json, into dir.
void write_hf_weights(const std::string& dir, const std::vector<HostTensor>& tensors, bool bf16, uint64_t shard_bytes);

}  // namespace rt
