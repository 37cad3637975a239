// prepare_generate_config / generate_layout / plan_generate (framework/plan/plan_generate.h).
#include "framework/plan/plan_generate.h"

#include <algorithm>
#include <cstdio>

#include "framework/plan/plan.h"
#include "framework/plan/plan_fit.h"
#include "framework/plan/trainer_setup.h"
#include "parallel/doc_balance.h"
#include "parallel/layout.h"

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

GenerateLayout generate_layout(const Config& config, int64_t prompt_tokens, int64_t new_tokens) {
  RT_CHECK(prompt_tokens >= 1 && new_tokens >= 0, "generate: a prompt of " << prompt_tokens << " tokens and "
           << new_tokens << " new tokens; give at least one prompt token and no negative count");
  const int cp = config.parallel.cp, ring = config.parallel.ring();
  GenerateLayout g;
  g.prompt = prompt_tokens;
  g.new_tokens = new_tokens;
  // The prefill runs the prompt but its last token, padded at the end to a length the layout takes (the padding
  // comes after every prompt token, so causal attention keeps it out of their K / V; its rows are not cached).
  const int64_t Pp = prompt_tokens - 1, unit = 2 * int64_t(cp);
  g.prefill_len = std::max(unit, (Pp + unit - 1) / unit * unit);
  g.rows_per_rank = g.prefill_len / cp;
  std::string layout_name = resolved_layout(config);
  if (layout_name == "auto") layout_name = ring > 1 ? "zigzag" : "contiguous";
  g.order = layout_ring_order(parse_layout(layout_name), g.prefill_len, ring);  // (T) ring order
  g.shard_rows.assign(size_t(cp), 0);                                          // (cp)
  for (int r = 0; r < cp; ++r)
    for (int64_t j = 0; j < g.rows_per_rank; ++j)
      g.shard_rows[size_t(r)] += g.order[size_t(r * g.rows_per_rank + j)] < Pp ? 1 : 0;
  const int64_t total = prompt_tokens + new_tokens;
  g.capacity = std::max(*std::max_element(g.shard_rows.begin(), g.shard_rows.end()), (total + cp - 1) / cp) + 1;
  return g;
}

GeneratePlan plan_generate(const Config& config, Device device, int64_t prompt_tokens, int64_t new_tokens) {
  GeneratePlan plan;
  plan.layout = generate_layout(config, prompt_tokens, new_tokens);
  Config c = config;
  c.data.seq_len = int(plan.layout.prefill_len);
  const ParallelConfig& p = c.parallel;
  SizeOnlyComm tp(p.tp), cp(p.cp), dp_cp(p.dp * p.cp), ring(p.ring()), a2a(p.cp_a2a);
  ModelComms comms;
  comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp, comms.tp_rank = 0;
  comms.ring = &ring, comms.a2a = &a2a;
  const ModelSession s = measure_session(c, comms, device, /*with_optimizer=*/false);
  plan.prefill_bytes = double(s.arena->peak());
  Arena cache_arena = Arena::measuring(device);
  const KvCache cache = s.model->make_kv_cache(cache_arena, plan.layout.capacity);
  plan.cache_bytes = double(cache_arena.peak());
  for (size_t l = 0; l < cache.k.size(); ++l) plan.kv_bytes += double(cache.k[l].nbytes() + cache.v[l].nbytes());
  plan.allowance_bytes = non_arena_allowance_bytes(device);
  plan.nccl_bytes = nccl_buffer_bytes(c, device);
  return plan;
}

namespace {

std::string bytes_text(double b) {
  char buf[48];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.3f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.3f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.0f bytes", b);
  return buf;
}

}  // namespace

std::string generate_memory_problem(const GeneratePlan& plan, double limit_bytes, const std::string& limit_from) {
  if (limit_bytes <= 0 || plan.arena_bytes() <= limit_bytes) return "";
  return "a prompt of " + std::to_string(plan.layout.prompt) + " tokens + " + std::to_string(plan.layout.new_tokens) +
         " new tokens does not fit: each rank needs " + bytes_text(plan.arena_bytes()) + " = the prefill's arena " +
         bytes_text(plan.prefill_bytes) + " (weights, activations of " + std::to_string(plan.layout.rows_per_rank) +
         " tokens per rank) + the KV cache " + bytes_text(plan.cache_bytes) + " (" +
         std::to_string(plan.layout.capacity) + " rows per rank), more than the " + bytes_text(limit_bytes) + " of " +
         limit_from + " (before the " + bytes_text(plan.allowance_bytes + plan.nccl_bytes) + " allowance the plan "
         "adds); shorten the prompt or --max-new-tokens, or spread the sequence over more ranks (parallel.cp), which "
         "shards both ('ringtrain plan CONFIG --generate-context P' shows the figures)";
}

}  // namespace rt
