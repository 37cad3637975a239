// Predicted time of a ring of packed documents (DESIGN.md "Document masks"): the kernels' time per call from the
// tile counts of parallel/schedule/ring_tile_cost.h, and the hops' time from a stated NVLink model, per ring step
// max(compute of the slowest rank, communication), summed over the steps: the critical path. The layout chooser
// (parallel/schedule/doc_balance.h) ranks its candidates by it; `ringtrain plan --doc-lengths` and bench_doc_ring_steps
// print it.
//
// Kernel time of one call (r, s) that runs, in microseconds, for H query heads:
//   call_us + H * (query_tile_us * active query tiles + full_us * full tiles + edge_us * partial tiles)
// The coefficients per head dim and direction are fitted to H200 measurements (bench/NOTES.md "Ring time model":
// the fit, its data and its error); a head dim without a fit scales the nearest one's tile terms by d / d_fit.
// Communication: a hop moves one block in hop_latency_us + bytes / bytes_per_us; a rank receives at most one K/V
// block per step, and in the backward also dK/dV accumulators (chain and home, parallel/schedule/ring_hops.h).
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/schedule/ring_hops.h"
#include "parallel/schedule/ring_tile_cost.h"

namespace rt {

struct KernelTimeModel {
  int64_t head_dim = 128;
  double call_us = 0;        // per call that runs: launch, prologue, document summaries, the last wave's tail
  double query_tile_us = 0;  // per query head and 64-row query tile that visits a key tile: Q and the state rows
  double full_us = 0;        // per query head and full (64 x 128) tile
  double edge_us = 0;        // per query head and partial tile (the element mask runs)
};

// The fitted model of the forward (backward = false) or backward kernels for head dim d.
KernelTimeModel kernel_time_model(bool backward, int64_t head_dim);
// The same fitted to the gather scheme's calls (parallel/schedule/gather_plan.h): its own and gathered calls and the
// own
// backward's parts, measured one by one; the ring's steps and whole calls keep kernel_time_model's.
KernelTimeModel gather_kernel_time_model(bool backward, int64_t head_dim);

// NVLink between two GPUs of an H200 node (NVSwitch), per direction, as NCCL send / recv reaches it.
struct LinkModel {
  double bytes_per_us = 350e3;  // 350 GB/s
  double hop_latency_us = 10;   // per hop (a posted group of sends / receives)
};

struct RingShape {
  int64_t heads = 16, kv_heads = 16, head_dim = 128;  // per rank (after any tp or a2a split)
  int64_t dtype_bytes = 2;                            // of K and V (bf16)
  int64_t dkv_wire_bytes = 4;                         // of the travelling dK / dV accumulator (f32; bf16: 2)
};

struct RingTimePrediction {
  double fwd_us = 0, bwd_us = 0;            // critical path: sum over steps of max(slowest rank, comm)
  double fwd_compute_us = 0, bwd_compute_us = 0;  // the same without communication
  double ideal_fwd_us = 0, ideal_bwd_us = 0;      // one whole call over the sample / cp
  double bytes_per_layer = 0, ring_bytes_per_layer = 0;  // all ranks, fwd + bwd: the hops run, the plain ring's
  double efficiency_fwd() const { return fwd_us > 0 ? ideal_fwd_us / fwd_us : 1; }
  double efficiency_bwd() const { return bwd_us > 0 ? ideal_bwd_us / bwd_us : 1; }
  double total_us() const { return fwd_us + bwd_us; }
  // The share of the critical path that communication adds over compute alone.
  double comm_share() const { return total_us() > 0 ? 1 - (fwd_compute_us + bwd_compute_us) / total_us() : 0; }
};

// Time of one call with the given tile counts.
double call_time_us(const KernelTimeModel& model, double full, double partial, double active, int64_t heads);

// The ring's prediction: tiles from ring_tile_cost (per-call counts), hops from ring_hop_plan*, whole from
// ring_tile_cost of the sample in position order with cp = 1; n = T / cp tokens per rank.
RingTimePrediction predict_ring_time(const RingTileCost& tiles, const RingHopPlan& hops, const RingTileCost& whole,
                                     int64_t n, const RingShape& shape, const LinkModel& link = {});

}  // namespace rt
