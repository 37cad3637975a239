// parallel.cp_a2a: auto (DESIGN.md "All-to-all and the hybrid"): the all-to-all degree u chosen by predicted time.
// For each u dividing cp, one layer's attention at u is priced as
//   the ring over cp/u ranks on H/(tp*u) query heads (parallel/schedule/ring_time_model.h, its best candidate layout of
//   parallel/schedule/doc_balance.h, or the given layout), run once per head group (context_attention.h's pipeline),
//   plus
//   the exchange's exposed time: bytes per rank from head_exchange_shape (the plan's byte formula) over an NVLink
//   all-to-all model (bench/NOTES.md "The all-to-all exchange"); with 1 head group each way is exposed whole, with
//   G = 2 groups the first group's way out and the last group's way back are exposed, and the other group's only
//   where it is longer than one group's ring.
// Config-free: the framework turns a config and its first samples into these inputs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/schedule/ring_time_model.h"

namespace rt {

// The model's shape as a tensor-parallel rank holds it before any exchange.
struct A2aModelShape {
  int64_t heads = 16, kv_heads = 16, head_dim = 128;  // the model's (n_head, n_kv_head, d_model / n_head)
  int tp = 1;
  int64_t dtype_bytes = 2;     // activations on the wire (bf16)
  int64_t dkv_wire_bytes = 4;  // the ring's travelling dK / dV (parallel.dkv_wire)
};

// The all-to-all exchange on NVLink: bytes sent per rank / busBw, plus a latency per exchange.
struct A2aLinkModel {
  double bytes_per_us = 370e3;      // ~370 GB/s effective per GPU (bench/NOTES.md)
  double exchange_latency_us = 20;  // per exchange
};

struct A2aCandidate {
  int u = 1;
  int ring = 1;                // cp / u
  bool admissible = false;
  std::string why_not;         // when not admissible: the rule it breaks
  int64_t q_heads = 0, kv_heads = 0;  // per rank in attention
  bool replicated = false;     // K/V heads held by several ranks
  int head_groups = 1;
  std::string ring_layout;     // the ring candidate priced (its label); "" at ring = 1 ... the whole call
  // Per layer, summed over the samples, microseconds:
  double ring_fwd_us = 0, ring_bwd_us = 0;          // the ring's critical path over all head groups
  double exchange_fwd_us = 0, exchange_bwd_us = 0;  // the exposed exchange
  double exchange_bytes = 0;                        // sent per rank per layer, fwd + bwd (per sample)
  double ideal_fwd_us = 0, ideal_bwd_us = 0;        // one whole call on H/tp heads / cp (the same for every u)
  double fwd_us() const { return ring_fwd_us + exchange_fwd_us; }
  double bwd_us() const { return ring_bwd_us + exchange_bwd_us; }
  double total_us() const { return fwd_us() + bwd_us(); }
  double efficiency_fwd() const { return fwd_us() > 0 ? ideal_fwd_us / fwd_us() : 1; }
  double efficiency_bwd() const { return bwd_us() > 0 ? ideal_bwd_us / bwd_us() : 1; }
};

struct A2aChoice {
  std::vector<A2aCandidate> candidates;  // every divisor u of cp, ascending (u = 1 first, always admissible)
  int pick = 1;                          // the admissible u of least total_us (ties: the smaller u)
  int samples = 1;                       // the candidates' times are sums over this many samples
  std::string why;                       // one sentence: why this u
  // One line: each candidate's predicted fwd / bwd efficiency and ms per layer and sample (the mean), or why it is not
  // admissible; the pick.
  std::string summary() const;
  const A2aCandidate& picked() const;
};

// samples: each sample's document start per position (T each, all the same T; a sample with no documents is all
// zeros: plain causal). layout: "" = each ring's best candidate (layout balanced / auto with documents), else the
// name of the ring_candidates entry to price (contiguous, zigzag, striped). Throws rt::Error on bad input
// (no sample, T not divisible by cp, heads not divisible by tp or kv_heads).
A2aChoice choose_a2a_degree(const std::vector<std::vector<int64_t>>& samples, int cp, const A2aModelShape& shape,
                            const std::string& layout = "", const A2aLinkModel& a2a_link = {});

}  // namespace rt
