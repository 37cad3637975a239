// What `ringtrain generate` needs on each rank (DESIGN.md "Generate"), shared by generate itself and by
// `ringtrain plan --generate-context P`, so that the plan's figures are the bytes generate allocates:
//   prefill  the prompt but its last token, either in one pass, padded at the end to T = a multiple of 2 cp, through
//            the training forward on the grid with no optimizer (the model's arena at seq_len T, batch 1, full
//            checkpointing); or, when that would not fit, in chunks of `chunk` tokens, each sharded over the cp
//            ranks (ceil(chunk / cp) tokens per rank, the model's arena at that many; which rows a rank holds goes
//            round from chunk to chunk) with its attention against the cache (Model::prefill_chunk): every rank
//            caches its own rows of each chunk;
//   cache    per rank, every layer's K and V for `capacity` rows of (Hkv / tp) * D in the activation dtype (bf16 on
//            CUDA, f32 on CPU), plus one decode step's buffers (and, chunked, the chunk's queries and attention
//            states); capacity = max(this grid's most prefill rows on one cp rank, ceil((prompt + new) / cp)) + 1 (cp
//            shards the cache, tp splits its KV heads).
// The chunk: --prefill-chunk N, else (0, auto) one pass when it fits the rank's memory, else the fewest chunks
// that fit (plan_generate).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/model/model.h"
#include "kernels/tensor.h"

namespace rt {

// The grid generate runs on: dp 1, zero 0, batch 1, full activation checkpointing, no offload, no documents, global
// positions (one prompt); the config's cp, cp_a2a and tp.
void prepare_generate_config(Config& config);

// Where the prompt's rows live on the cp ranks (config already prepared).
struct GenerateLayout {
  int64_t prompt = 0, new_tokens = 0;
  int64_t chunk = 0;                // prefill tokens per chunk; 0: one pass (the training forward on the grid)
  int64_t chunks = 1;               // prefill passes: 1, or ceil((prompt - 1) / chunk)
  int64_t prefill_len = 0;          // one pass: T = prompt - 1 padded to a multiple of 2 cp (at least 2 cp);
                                    // chunked: chunks * chunk (the last chunk padded at the end)
  int64_t rows_per_rank = 0;        // the forward's local tokens: T / cp, or ceil(chunk / cp) (a chunk's rows
                                    // [r n, (r + 1) n) on cp rank r; past the prompt: padding)
  std::vector<int64_t> order;       // one pass: (T) the global position at each ring slot (rank r holds
                                    // [r n, (r + 1) n)); chunked: empty
  std::vector<int64_t> shard_rows;  // (cp) prompt rows each cp rank caches after the prefill
  int64_t capacity = 0;             // cache rows per rank
};
// chunk: 0 or >= prompt - 1 (the whole prefill fits one chunk): one pass; else chunks of that many tokens.
GenerateLayout generate_layout(const Config& config, int64_t prompt_tokens, int64_t new_tokens, int64_t chunk = 0);

// The prompt rows a cp rank holds (and caches) of a chunk with `valid` prompt tokens sharded `n` per rank, when it
// holds the chunk's rows [slot n, (slot + 1) n) (slot: prefill_chunk_slot): clamp(valid - slot n, 0, n).
int64_t chunk_rows_in_slot(int64_t valid, int64_t n, int64_t slot);

// The config the prefill's model is built from: seq_len T (one pass) or ceil(chunk / cp) * cp with the contiguous
// layout (chunked: its forward runs no ring, generate_model_comms).
Config generate_model_config(const Config& prepared, const GenerateLayout& layout);
// The model's communicators: the grid's; chunked, its ring and all-to-all are `one` (a group of one rank: the
// chunk's attention gathers the chunk's queries over the cp group and merges the states of every rank's cache shard).
ModelComms generate_model_comms(ModelComms grid, const GenerateLayout& layout, Comm& one);

// How the prefill is chunked: --prefill-chunk (0 = auto), and for auto the memory a rank has.
struct PrefillChunking {
  int64_t request = 0;      // tokens per chunk; 0: auto
  double limit_bytes = 0;   // auto: a rank's memory (<= 0: unknown, one pass)
  std::string limit_from;   // where limit_bytes came from ("the GPU", "--device-memory-gib", ...)
};

// Bytes per rank (rank cp 0, tp 0; every rank holds the same sizes).
struct GeneratePlan {
  GenerateLayout layout;
  double kv_bytes = 0;       // K and V of every layer: 2 L capacity (Hkv / tp) D x act bytes
  double cache_bytes = 0;    // the cache's arena: K / V plus one decode step's buffers (Model::make_kv_cache), and
                             // chunked, the chunk's gathered queries and attention states
  double chunk_bytes = 0;    // chunked: those queries and states (part of cache_bytes); else 0
  double prefill_bytes = 0;  // the model's arena for the prefill (weights, activations of rows_per_rank tokens)
  double allowance_bytes = 0, nccl_bytes = 0;  // as `ringtrain plan` counts them (plan_fit.h)
  double one_pass_bytes = 0;  // chunked: device_bytes() of the one-pass prefill (what did not fit); else 0
  std::string chunk_note;     // chunked: why ("--prefill-chunk N", or the bytes that did not fit); else ""
  double arena_bytes() const { return prefill_bytes + cache_bytes; }
  double device_bytes() const { return arena_bytes() + allowance_bytes + nccl_bytes; }
};
// Measured on Arena::measuring (allocates nothing). `config` prepared by prepare_generate_config, its model set.
// Chunking: chunking.request > 0 takes that chunk; auto (0) plans one pass, and when its device_bytes() exceed
// chunking.limit_bytes the fewest chunks that fit (the bytes depend on the chunk only through its tokens per rank),
// evened out: N = cp * ceil(ceil((prompt - 1) / k) / cp) tokens each for the least k with N fitting; when none
// fits, chunks of one token.
GeneratePlan plan_generate(const Config& config, Device device, int64_t prompt_tokens, int64_t new_tokens,
                           const PrefillChunking& chunking = {});

// "" or generate's refusal: the arenas alone (exact) exceed `limit_bytes` per rank. Names the numbers and what to
// change. `limit_from` says where the limit came from.
std::string generate_memory_problem(const GeneratePlan& plan, double limit_bytes, const std::string& limit_from);

}  // namespace rt
