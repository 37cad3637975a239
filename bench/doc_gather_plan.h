// bench_doc_ring_steps --scheme gather, the host side (no GPU): the gather scheme's plan for one ring order and the
// kernel time model's prediction (parallel/schedule/gather_plan.h), and the plan line it prints, with --plan-only
// too, and the one-launch calls' forms by RingAttention's rule. What the scheme runs on the GPU and how it is timed:
// bench/doc_gather_steps.cuh.
#pragma once
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "parallel/cp/gather_list_form.h"
#include "parallel/schedule/gather_plan.h"
#include "parallel/schedule/ring_spans.h"
#include "parallel/schedule/ring_tile_cost.h"
#include "parallel/schedule/ring_time_model.h"

namespace rt::bench {

// The host side of the scheme for one ring order: the plan and the kernel time model's prediction.
struct GatherBench {
  KvGatherPlan plan;
  KvGatherTiles tiles;               // kv_gather_tiles
  std::vector<OwnBwdSplit> splits;   // (cp) each rank's own backward split (predict_own_bwd_split)
  std::vector<char> one_launch;      // (cp) each rank's forward in one launch (predict_gather_calls' one_fwd > 0)
  std::vector<char> one_launch_bwd;  // (cp) and its backward (one_bwd > 0)
  RingTimePrediction predicted;      // predict_gather_time
  double c_kv_us = 0, c_dkv_us = 0;  // the exchanges of the NVLink model (gather_exchange_us)
};

inline GatherBench gather_bench(const std::vector<int64_t>& starts, const std::vector<int64_t>& order, int cp,
                                const RingShape& shape) {
  GatherBench g;
  const std::vector<RingSpan> spans = ring_spans_from_order(order, cp);
  g.plan = kv_gather_plan_for_spans(document_begins(starts), spans, cp);
  std::vector<int64_t> natural(starts.size());  // (T) position order
  std::iota(natural.begin(), natural.end(), int64_t(0));
  g.tiles = kv_gather_tiles(starts, spans, g.plan, cp);
  for (int r = 0; r < cp; ++r) g.splits.push_back(predict_own_bwd_split(g.tiles, g.plan, r, shape));
  const GatherCallTimes calls = predict_gather_calls(g.tiles, g.plan, shape);
  for (double one : calls.one_fwd) g.one_launch.push_back(one > 0);
  for (double one : calls.one_bwd) g.one_launch_bwd.push_back(one > 0);
  g.predicted = predict_gather_time(g.tiles, g.plan, ring_tile_cost(starts, natural, 1), shape);
  g.c_kv_us = gather_exchange_us(g.plan, shape, false);
  g.c_dkv_us = gather_exchange_us(g.plan, shape, true);
  return g;
}

inline std::string gather_join(const std::vector<int64_t>& xs) {  // "a,b,c"
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? "," : "") + std::to_string(xs[i]);
  return s;
}

// The plan line (also with --plan-only): rows received and sent per rank, bytes, the exchanges, the model's path.
inline void print_gather_plan(const GatherBench& g) {
  const RingTimePrediction& p = g.predicted;
  std::printf("gather plan: rows received per rank %s (max %ld, total %ld); rows sent per rank %s; bytes per layer "
              "%.0f of the ring's %.0f (%.2f%%); exchange %.1f us K/V, %.1f us dK/dV (NVLink model %.0f GB/s, %.0f us "
              "latency); model: path fwd %.3f ms bwd %.3f ms (efficiency %.3f / %.3f), compute only fwd %.3f ms bwd "
              "%.3f ms\n",
              gather_join(g.plan.recv_rows).c_str(), long(g.plan.max_recv_rows()), long(g.plan.total_rows()),
              gather_join(g.plan.send_rows).c_str(), p.bytes_per_layer, p.ring_bytes_per_layer,
              p.ring_bytes_per_layer > 0 ? 100 * p.bytes_per_layer / p.ring_bytes_per_layer : 0.0, g.c_kv_us,
              g.c_dkv_us, LinkModel{}.bytes_per_us * 1e-3, LinkModel{}.hop_latency_us, p.fwd_us * 1e-3,
              p.bwd_us * 1e-3, p.efficiency_fwd(), p.efficiency_bwd(), p.fwd_compute_us * 1e-3,
              p.bwd_compute_us * 1e-3);
  std::vector<int64_t> m;  // (cp)
  std::string parts;
  char cell[48];
  for (size_t r = 0; r < g.splits.size(); ++r) {
    m.push_back(g.splits[r].m);
    std::snprintf(cell, sizeof(cell), "%s%.0f/%.0f", r ? "," : "", g.splits[r].a_us, g.splits[r].b_us);
    parts += cell;
  }
  std::printf("gather own backward split (model): key row m per rank %s (0: one call); parts A/B us per rank %s\n",
              gather_join(m).c_str(), parts.c_str());
}

// The forms line (also with --plan-only): the one-launch forward's and backward's kernels by RingAttention's rule
// (parallel/cp/gather_list_form.h) with the knob `list_on` (gather_work_list_from_env), where their list kernels run
// the call (the GPU decides per rank: the measured lines mark each rank's), and the ranks whose model runs them in one
// launch. bench/doc_attention_side_by_side.py --self-test reads it.
inline void print_gather_forms(const GatherBench& g, bool list_on) {
  auto ranks = [](const std::vector<char>& on) {
    std::string s;
    for (size_t r = 0; r < on.size(); ++r)
      if (on[r]) s += (s.empty() ? "" : ",") + std::to_string(r);
    return s.empty() ? std::string("none") : s;
  };
  const bool fwd_list = gather_fwd_list_form(list_on, /*list_runs=*/true);
  const bool bwd_list = gather_bwd_list_form(list_on, /*fp8_backward=*/false, /*list_runs=*/true);
  std::printf("gather one-launch forms (RingAttention's rule): forward %s, backward %s%s (%s); the model's one launch: "
              "forward on ranks %s, backward on ranks %s\n",
              fwd_list ? "attn_fwd_work_list" : "attn_fwd_whole_two_kv",
              bwd_list ? "attn_bwd_work_list" : "attn_bwd_block_fresh_two_kv",
              fwd_list || bwd_list ? " where the list kernel runs the call, else the two_kv call" : "",
              list_on ? "RT_ATTN_WORK_LIST unset or 1: the default" : "RT_ATTN_WORK_LIST=0",
              ranks(g.one_launch).c_str(), ranks(g.one_launch_bwd).c_str());
}

}  // namespace rt::bench
