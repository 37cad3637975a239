// prepare_generate_config / generate_layout / plan_generate (framework/plan/plan_generate.h).
#include "framework/plan/plan_generate.h"

#include <algorithm>
#include <cstdio>

#include "framework/plan/plan.h"
#include "framework/plan/plan_fit.h"
#include "framework/plan/trainer_setup.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/layout.h"

namespace rt {

void prepare_generate_config(Config& c) {
  c.parallel.dp = 1;
  c.parallel.zero = 0;
  c.train.batch_size = 1;
  c.train.checkpointing = "full";
  c.train.offload = "none";
  c.data.documents = "none";
  c.data.positions = "global";
  if (c.parallel.layout == "balanced") c.parallel.layout = "auto";
}

int64_t chunk_rows_in_slot(int64_t valid, int64_t n, int64_t slot) {
  return std::clamp<int64_t>(valid - slot * n, 0, n);
}

GenerateLayout generate_layout(const Config& config, int64_t prompt_tokens, int64_t new_tokens, int64_t chunk) {
  RT_CHECK(prompt_tokens >= 1 && new_tokens >= 0, "generate: a prompt of " << prompt_tokens << " tokens and "
           << new_tokens << " new tokens; give at least one prompt token and no negative count");
  RT_CHECK(chunk >= 0, "generate: --prefill-chunk " << chunk << " must be 0 (auto) or a number of tokens");
  const int cp = config.parallel.cp, ring = config.parallel.ring();
  GenerateLayout g;
  g.prompt = prompt_tokens;
  g.new_tokens = new_tokens;
  const int64_t Pp = prompt_tokens - 1;  // the prefill's tokens: the last prompt token is the first decode step
  g.shard_rows.assign(size_t(cp), 0);   // (cp)
  if (chunk > 0 && chunk < Pp) {
    // Chunks of `chunk` tokens, each sharded over the cp ranks, n rows each (padded at the end: the pad is not
    // cached; the slots rotate, prefill_chunk_slot); every rank caches its prompt rows of each chunk.
    g.chunk = chunk;
    g.chunks = (Pp + chunk - 1) / chunk;
    g.prefill_len = g.chunks * chunk;
    g.rows_per_rank = (chunk + cp - 1) / cp;
    for (int64_t c = 0; c < g.chunks; ++c) {
      const int64_t valid = std::min(chunk, Pp - c * chunk);
      for (int r = 0; r < cp; ++r)
        g.shard_rows[size_t(r)] += chunk_rows_in_slot(valid, g.rows_per_rank, prefill_chunk_slot(r, c, cp));
    }
  } else {
    // One pass: the prompt but its last token, padded at the end to a length the layout takes (the padding comes
    // after every prompt token, so causal attention keeps it out of their K / V; its rows are not cached).
    const int64_t unit = 2 * int64_t(cp);
    g.prefill_len = std::max(unit, (Pp + unit - 1) / unit * unit);
    g.rows_per_rank = g.prefill_len / cp;
    g.order = layout_ring_order(parse_layout(resolved_layout(config)), g.prefill_len, ring);  // (T) ring order
    for (int r = 0; r < cp; ++r)
      for (int64_t j = 0; j < g.rows_per_rank; ++j)
        g.shard_rows[size_t(r)] += g.order[size_t(r * g.rows_per_rank + j)] < Pp ? 1 : 0;
  }
  const int64_t total = prompt_tokens + new_tokens;
  g.capacity = std::max(*std::max_element(g.shard_rows.begin(), g.shard_rows.end()), (total + cp - 1) / cp) + 1;
  return g;
}

Config generate_model_config(const Config& prepared, const GenerateLayout& layout) {
  Config c = prepared;
  if (layout.chunk > 0) {
    c.data.seq_len = int(layout.rows_per_rank * c.parallel.cp);  // tokens_per_rank: the chunk's rows per rank
    c.parallel.layout = "contiguous";                            // a ring of one: the rows in order
  } else {
    c.data.seq_len = int(layout.prefill_len);
  }
  return c;
}

ModelComms generate_model_comms(ModelComms grid, const GenerateLayout& layout, Comm& one) {
  RT_CHECK(one.size() == 1, "generate: the chunked prefill's ring must be a group of one rank");
  if (layout.chunk > 0) grid.ring = &one, grid.a2a = &one;
  return grid;
}

namespace {

std::string bytes_text(double b) {
  char buf[48];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.3f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.3f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.0f bytes", b);
  return buf;
}

// The plan of one layout: both arenas measured on the calls generate makes.
GeneratePlan measure_generate(const Config& config, Device device, const GenerateLayout& layout) {
  GeneratePlan plan;
  plan.layout = layout;
  const Config c = generate_model_config(config, layout);
  const ParallelConfig& p = c.parallel;
  SizeOnlyComm tp(p.tp), cp(p.cp), dp_cp(p.dp * p.cp), ring(p.ring()), a2a(p.cp_a2a), one(1);
  ModelComms comms;
  comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp, comms.tp_rank = 0;
  comms.ring = &ring, comms.a2a = &a2a;
  const ModelSession s = measure_session(c, generate_model_comms(comms, layout, one), device,
                                         /*with_optimizer=*/false);
  plan.prefill_bytes = double(s.arena->peak());
  Arena cache_arena = Arena::measuring(device);
  const KvCache cache = s.model->make_kv_cache(cache_arena, layout.capacity, /*chunked_prefill=*/layout.chunk > 0);
  plan.cache_bytes = double(cache_arena.peak());
  for (size_t l = 0; l < cache.k.size(); ++l) plan.kv_bytes += double(cache.k[l].nbytes() + cache.v[l].nbytes());
  for (const Tensor* t : {&cache.chunk_state, &cache.chunk_states, &cache.chunk_q})
    plan.chunk_bytes += t->ndim > 0 ? double(t->nbytes()) : 0;  // (absent ones have no shape)
  plan.allowance_bytes = non_arena_allowance_bytes(device);
  plan.nccl_bytes = nccl_buffer_bytes(c, device);
  return plan;
}

}  // namespace

GeneratePlan plan_generate(const Config& config, Device device, int64_t prompt_tokens, int64_t new_tokens,
                           const PrefillChunking& chunking) {
  RT_CHECK(chunking.request >= 0, "generate: --prefill-chunk " << chunking.request
                                      << " must be 0 (auto: chunks only when the prompt does not fit) or a number "
                                         "of tokens per chunk");
  auto plan_at = [&](int64_t chunk) {
    return measure_generate(config, device, generate_layout(config, prompt_tokens, new_tokens, chunk));
  };
  if (chunking.request > 0) {
    GeneratePlan p = plan_at(chunking.request);
    if (p.layout.chunk > 0) p.chunk_note = "--prefill-chunk " + std::to_string(chunking.request);
    return p;
  }
  GeneratePlan whole = plan_at(0);
  const int64_t Pp = prompt_tokens - 1;
  const double limit = chunking.limit_bytes;
  if (limit <= 0 || whole.device_bytes() <= limit || Pp <= 1) return whole;
  // The largest chunk that fits (the bytes grow with the chunk's tokens per rank: fits(good), !fits(bad); the whole
  // prompt does not fit), then as many chunks made even, a multiple of cp tokens each (the same tokens per rank).
  const auto fits = [&](int64_t chunk) { return plan_at(chunk).device_bytes() <= limit; };
  int64_t good = 0, bad = Pp;
  if (fits(1)) {
    good = 1;
    while (bad - good > 1) {
      const int64_t mid = good + (bad - good) / 2;
      (fits(mid) ? good : bad) = mid;
    }
  }
  const int64_t cp = config.parallel.cp;
  int64_t chunks = good > 0 ? (Pp + good - 1) / good : Pp;
  // n chunks made even, a multiple of cp tokens each.
  const auto even_chunk = [&](int64_t n) { return ((Pp + n - 1) / n + cp - 1) / cp * cp; };
  // The bytes are not monotone in the chunk (the auto MLP chunk starts splitting the hidden buffers past a size, and
  // rows round per rank), so fewer chunks than the search's largest fitting chunk implies may fit: take the fewest.
  bool fewer = false;
  while (good > 0 && chunks > 1 && fits(even_chunk(chunks - 1))) --chunks, fewer = true;
  GeneratePlan p = plan_at(good > 0 ? (fewer ? even_chunk(chunks) : std::min(good, even_chunk(chunks))) : 1);
  p.one_pass_bytes = whole.device_bytes();
  const std::string what = "the whole prompt's prefill needs " + bytes_text(whole.device_bytes()) +
                           " per rank (its arena " + bytes_text(whole.prefill_bytes) + " for " +
                           std::to_string(whole.layout.rows_per_rank) + " tokens per rank, the KV cache " +
                           bytes_text(whole.cache_bytes) + ", the allowance " +
                           bytes_text(whole.allowance_bytes + whole.nccl_bytes) + "), more than the " +
                           bytes_text(limit) + " of " + chunking.limit_from;
  p.chunk_note = good > 0 ? what + "; " + std::to_string(p.layout.chunk) + " tokens per chunk fit (--prefill-chunk "
                                   "N sets the chunk)"
                          : what + ", and no chunk fits either (1 token per chunk needs " +
                                bytes_text(p.device_bytes()) + ")";
  return p;
}

std::string generate_memory_problem(const GeneratePlan& plan, double limit_bytes, const std::string& limit_from) {
  if (limit_bytes <= 0 || plan.arena_bytes() <= limit_bytes) return "";
  const GenerateLayout& g = plan.layout;
  const std::string chunked = g.chunk > 0 ? ", prefilled in " + std::to_string(g.chunks) + " chunks of " +
                                                std::to_string(g.chunk) + " tokens"
                                          : "";
  return "a prompt of " + std::to_string(g.prompt) + " tokens + " + std::to_string(g.new_tokens) +
         " new tokens does not fit" + chunked + ": each rank needs " + bytes_text(plan.arena_bytes()) +
         " = the prefill's arena " + bytes_text(plan.prefill_bytes) + " (weights, activations of " +
         std::to_string(g.rows_per_rank) + " tokens per rank) + the KV cache " + bytes_text(plan.cache_bytes) + " (" +
         std::to_string(g.capacity) + " rows per rank), more than the " + bytes_text(limit_bytes) + " of " +
         limit_from + " (before the " + bytes_text(plan.allowance_bytes + plan.nccl_bytes) + " allowance the plan "
         "adds); shorten the prompt or --max-new-tokens, " +
         (g.chunk > 1    ? "prefill in smaller chunks (--prefill-chunk), "
          : g.chunk == 0 ? "prefill in chunks (--prefill-chunk N, or 0 to fit them), "
                         : "") +
         "or spread the sequence over more ranks (parallel.cp), which shards " +
         (g.chunk > 0 ? "the cache" : "both") + " ('ringtrain plan CONFIG --generate-context P' shows the figures)";
}

}  // namespace rt
