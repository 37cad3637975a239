// `ringtrain generate` (DESIGN.md "Generate"): token ids in, token ids out (JSON), on the configured grid.
//   prefill: the prompt but its last token, through the training forward on the cp x tp grid (ring, all-to-all or
//            hybrid); each rank keeps its own rows of every layer's K (after RoPE) and V as its shard of the cache.
//            When that pass does not fit the rank's memory (or --prefill-chunk N asks), in chunks: every cp rank
//            runs each chunk against the cache (Model::prefill_chunk) and caches its piece of it;
//   decode:  every rank runs the new token (tp splits heads), attends over its shard (attn_decode_partial), the
//            fp32 states are merged over the cp group, and the token's K / V are appended to the rank with the
//            fewest rows (round-robin once the shards are even). The last prompt token is the first decode step.
//            On one CUDA rank each step is one replay of a CUDA graph (--cuda-graph, framework/eval/decode_graph.h).
// Sampling: framework/eval/sampling.h. Stops at the EOS id or after max_new_tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/eval/sampling.h"

namespace rt {

struct GenerateArgs {
  std::string checkpoint;       // checkpoint directory or model.safetensors
  std::string prompt_ids_file;  // a JSON array of ids, or ids separated by commas / white space
  std::string prompt;           // the same, inline ("1,2,3")
  bool prompt_given = false;    // --prompt was given (possibly empty)
  std::string out;              // JSON result file ("" = stdout)
  bool overwrite = false;       // --overwrite: replace an existing --out / --dump-logits (framework/base/output_files.h)
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  bool eos_given = false;       // --eos-id (a negative id: never stop at EOS)
  int64_t eos_id = -1;
  double device_memory_gib = 0;  // per rank; 0: the GPU's memory (CPU: the host's over the ranks)
  int64_t prefill_chunk = 0;     // prefill tokens per chunk; 0: auto (one pass when it fits, else chunks that fit)
  std::string dump_logits;       // .npy (steps, V) f32: the logits each new token was chosen from ("" = none)
  std::string cuda_graph = "auto";  // auto | on | off: one CUDA graph per decode step (framework/eval/decode_graph.h)
  bool profile = false;  // --profile: every CUDA op of the prefill and the (ungraphed) decode timed, totals on stderr
  // --warmup: the prefill runs once untimed before the timed one (the same prompt and shapes: cuBLASLt's plans are
  // chosen and the kernels loaded), its seconds reported as prefill_warmup_s; the cache is emptied between the two.
  bool warmup = false;
};

// Ids from text: a JSON array of integers, or integers separated by commas and / or white space. Throws rt::Error
// naming `what` and the first bad entry.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& what);

// The EOS id: --eos-id, else eos_token_id of the Hugging Face directory the weights came from (config.json, then
// generation_config.json; the first of a list), else data.eot_token when set, else -1 (none).
int64_t resolve_eos_id(const GenerateArgs& args, const Config& config, const std::string& hf_source);

// "" or the refusal of a prompt of `prompt_len` tokens for a model trained at `trained_len` tokens: longer is
// allowed (`warning` set) when the RoPE scaling covers it (original_max_position_embeddings x factor), else refused.
std::string check_prompt_length(int64_t prompt_len, int64_t trained_len, const RopeScalingConfig& rope,
                                std::string* warning);

int generate_main(const Config& config, const GenerateArgs& args, int world_size);

}  // namespace rt
