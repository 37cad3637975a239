// The ring's predicted time (parallel/schedule/ring_time_model.h).
#include "parallel/schedule/ring_time_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/tensor.h"
#include "parallel/schedule/ring_schedule.h"

namespace rt {

namespace {

// Fitted on the H200 (bench/NOTES.md "Ring time model": the fit, its data and its error): least squares of the
// relative error over measured whole calls (16, 4 and 2 heads, 64K-512K) and cp = 8 rings' calls in sequence
// (bench/results/2026-12-01-h200-doc-cp8, -a2a-per-rank), by bench/fit_ring_time_model.py. Only d = 128 was measured.
const KernelTimeModel kForward[] = {{128, 56.5, 0.0138, 0.00694, 0.0155}};
const KernelTimeModel kBackward[] = {{128, 74.0, 0.0334, 0.0178, 0.0197}};
// The gather scheme's calls (own, gathered, the own backward's parts), refitted on 2026-12-04 (second refit) to 2,641
// of them measured one by one on the H200: the 1,752 of bench/results/2026-12-04-h200-doc-cp8-default.jsonl (cp 8,
// 16/16 and 32/8 heads, 64K and 128K) and the 889 of bench/results/2026-12-02-h200-doc-cp8-gather/session3.jsonl (cp 4
// and 8, 16 and 32/8 heads, 64K-512K), by bench/fit_ring_time_model.py --gather. A K/V-head term (query heads per K/V
// head x active query tiles: the backward's items are K/V head x key tile) moved the offline fit little (32/8 own
// backward part B: mean signed error -0.17 -> -0.13), so it is not in the model. The previous fit: forward {45.56,
// 0.0343, 0.007807, 0.00221}, backward {17.91, 0.01543, 0.01883, 0.03641}.
const KernelTimeModel kGatherForward[] = {{128, 26.45, 0.04036, 0.00786, 0}};
const KernelTimeModel kGatherBackward[] = {{128, 16.55, 0.0189, 0.01879, 0.0386}};

// The entry of `table` (count entries) nearest head_dim, its tile terms scaled by head_dim / its head dim.
KernelTimeModel nearest_model(const KernelTimeModel* table, size_t count, int64_t head_dim) {
  RT_CHECK(head_dim > 0, "kernel_time_model: head_dim " << head_dim << " must be positive");
  const KernelTimeModel* best = &table[0];
  for (size_t i = 1; i < count; ++i)
    if (std::llabs(table[i].head_dim - head_dim) < std::llabs(best->head_dim - head_dim)) best = &table[i];
  KernelTimeModel m = *best;
  const double scale = double(head_dim) / double(best->head_dim);
  m.head_dim = head_dim;
  m.query_tile_us *= scale, m.full_us *= scale, m.edge_us *= scale;
  return m;
}

}  // namespace

KernelTimeModel kernel_time_model(bool backward, int64_t head_dim) {
  return backward ? nearest_model(kBackward, std::size(kBackward), head_dim)
                  : nearest_model(kForward, std::size(kForward), head_dim);
}

KernelTimeModel gather_kernel_time_model(bool backward, int64_t head_dim) {
  return backward ? nearest_model(kGatherBackward, std::size(kGatherBackward), head_dim)
                  : nearest_model(kGatherForward, std::size(kGatherForward), head_dim);
}

double call_time_us(const KernelTimeModel& model, double full, double partial, double active, int64_t heads) {
  return model.call_us +
         double(heads) * (model.query_tile_us * active + model.full_us * full + model.edge_us * partial);
}

RingTimePrediction predict_ring_time(const RingTileCost& tiles, const RingHopPlan& hops, const RingTileCost& whole,
                                     int64_t n, const RingShape& shape, const LinkModel& link) {
  const int cp = hops.cp;
  RT_CHECK(tiles.runs.size() == size_t(cp) * size_t(cp) && whole.runs.size() == 1,
           "predict_ring_time: tiles must be ring_tile_cost of " << cp << " ranks and whole of one rank");
  const KernelTimeModel fwd = kernel_time_model(false, shape.head_dim), bwd = kernel_time_model(true, shape.head_dim);
  auto call = [&](const KernelTimeModel& m, int r, int s) {
    const size_t i = size_t(r * cp + s);
    return tiles.runs[i] ? call_time_us(m, tiles.full_tiles[i], tiles.partial_tiles[i], tiles.active[i], shape.heads)
                         : 0.0;
  };
  const double kv_bytes = 2.0 * double(n) * double(shape.kv_heads * shape.head_dim * shape.dtype_bytes);
  const double dkv_bytes = 2.0 * double(n) * double(shape.kv_heads * shape.head_dim * shape.dkv_wire_bytes);
  auto hop_us = [&](double bytes) { return bytes > 0 ? link.hop_latency_us + bytes / link.bytes_per_us : 0.0; };
  RingTimePrediction p;
  // Forward step t: rank r runs its queries against block r - t; the hop that brought that block ran alongside
  // step t-1, so it is charged to step t - 1 (a step costs max(compute, the hop in flight)).
  for (int t = 0; t < cp; ++t) {
    double compute = 0, comm = 0;
    for (int r = 0; r < cp; ++r) {
      compute = std::max(compute, call(fwd, r, ring_source(r, t, cp)));
      if (t + 1 < cp && hops.kv_hop(r - t - 1, t + 1)) comm = std::max(comm, hop_us(kv_bytes));
    }
    p.fwd_compute_us += compute;
    p.fwd_us += std::max(compute, comm);
  }
  // Backward step i: rank r runs block r - 1 - i (its own at i = cp - 1). In flight during it: the K/V hop for step
  // i + 1 and the dK/dV accumulators of step i (into rank r: from r - 1 along the chain, and its own coming home).
  // The first K/V hop (distance 1) runs before step 0, exposed.
  double first = 0;
  for (int r = 0; r < cp; ++r)
    if (hops.kv_hop(r - 1, 1)) first = hop_us(kv_bytes);
  p.bwd_us += first;
  for (int i = 0; i < cp; ++i) {
    double compute = 0, comm = 0;
    for (int r = 0; r < cp; ++r) {
      compute = std::max(compute, call(bwd, r, ring_source(r, i + 1, cp)));
      double in = 0;
      if (i + 1 < cp - 1 && hops.kv_hop(r - i - 2, i + 2)) in += kv_bytes;
      if (i >= 1) {
        const int block = ring_source(r, i + 1, cp);
        if (i < cp - 1 && i < hops.kv_hops[size_t(block)]) in += dkv_bytes;  // along the chain
        if (i == hops.kv_hops[size_t(r)]) in += dkv_bytes;                   // home
      }
      comm = std::max(comm, hop_us(in));
    }
    p.bwd_compute_us += compute;
    p.bwd_us += std::max(compute, comm);
  }
  const double whole_fwd = call_time_us(fwd, whole.full_tiles[0], whole.partial_tiles[0], whole.active[0], shape.heads);
  const double whole_bwd = call_time_us(bwd, whole.full_tiles[0], whole.partial_tiles[0], whole.active[0], shape.heads);
  p.ideal_fwd_us = whole_fwd / cp;
  p.ideal_bwd_us = whole_bwd / cp;
  p.bytes_per_layer = hops.bytes_per_layer(kv_bytes, dkv_bytes);
  p.ring_bytes_per_layer = ring_hop_plan_full(cp).bytes_per_layer(kv_bytes, dkv_bytes);
  return p;
}

}  // namespace rt
