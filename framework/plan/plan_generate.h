// What `ringtrain generate` needs on each rank (DESIGN.md "Generate"), shared by generate itself and by
// `ringtrain plan --generate-context P`, so that the plan's figures are the bytes generate allocates:
//   prefill  the prompt but its last token, padded at the end to T = a multiple of 2 cp, run through the training
//            forward on the grid with no optimizer (the model's arena at seq_len T, batch 1, full checkpointing);
//   cache    per rank, every layer's K and V for `capacity` rows of (Hkv / tp) * D in the activation dtype (bf16 on
//            CUDA, f32 on CPU), plus one decode step's buffers; capacity = max(this grid's most prefill rows on one
//            cp rank, ceil((prompt + new) / cp)) + 1 (cp shards the cache, tp splits its KV heads).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "kernels/tensor.h"

namespace rt {

// The grid generate runs on: dp 1, zero 0, batch 1, full activation checkpointing, no offload, no documents, global
// positions (one prompt); the config's cp, cp_a2a and tp.
void prepare_generate_config(Config& config);

// Where the prompt's rows live on the cp ranks (config already prepared).
struct GenerateLayout {
  int64_t prompt = 0, new_tokens = 0;
  int64_t prefill_len = 0;          // T: prompt - 1 padded to a multiple of 2 cp (at least 2 cp)
  int64_t rows_per_rank = 0;        // T / cp: the forward's local tokens
  std::vector<int64_t> order;       // (T) the global position at each ring slot (rank r holds [r n, (r + 1) n))
  std::vector<int64_t> shard_rows;  // (cp) prompt rows each cp rank caches after the prefill
  int64_t capacity = 0;             // cache rows per rank
};
GenerateLayout generate_layout(const Config& config, int64_t prompt_tokens, int64_t new_tokens);

// Bytes per rank (rank cp 0, tp 0; every rank holds the same sizes).
struct GeneratePlan {
  GenerateLayout layout;
  double kv_bytes = 0;       // K and V of every layer: 2 L capacity (Hkv / tp) D x act bytes
  double cache_bytes = 0;    // the cache's arena: K / V plus one decode step's buffers (Model::make_kv_cache)
  double prefill_bytes = 0;  // the model's arena for the prefill (weights, activations at seq_len T)
  double allowance_bytes = 0, nccl_bytes = 0;  // as `ringtrain plan` counts them (plan_fit.h)
  double arena_bytes() const { return prefill_bytes + cache_bytes; }
  double device_bytes() const { return arena_bytes() + allowance_bytes + nccl_bytes; }
};
// Measured on Arena::measuring (allocates nothing). `config` prepared by prepare_generate_config, its model set.
GeneratePlan plan_generate(const Config& config, Device device, int64_t prompt_tokens, int64_t new_tokens);

// "" or generate's refusal: the arenas alone (exact) exceed `limit_bytes` per rank. Names the numbers and what to
// change. `limit_from` says where the limit came from.
std::string generate_memory_problem(const GeneratePlan& plan, double limit_bytes, const std::string& limit_from);

}  // namespace rt
