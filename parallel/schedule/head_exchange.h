// The all-to-all head exchange's plan (parallel.cp_a2a = u > 1; parallel/cp/context_attention.h runs it): which
// heads each rank holds after the exchange, the pipeline's head groups, and the bytes and buffers per layer. Host
// only, so the choosers (parallel/schedule/a2a_choice.h) and the planner price it without the exchange.
#pragma once
#include <cstdint>

#include "parallel/schedule/attention_shape.h"

namespace rt {

// Heads and bytes of the head exchange for a shape (tokens per rank n, local heads H / Hkv) and degree u.
struct HeadExchangeShape {
  int u = 1;
  int64_t q_heads = 0;     // hq = H / u query heads per rank after the exchange
  int64_t kv_heads = 0;    // hk KV heads per rank after the exchange
  int64_t kv_group = 1;    // s: query heads per KV head after the exchange
  bool replicated = false; // u * hk > Hkv: some KV heads are held by several ranks
  int head_groups = 1;      // G: the pipeline's head groups (pipeline_head_groups below)
  // Bytes one rank sends per layer (the chunk it keeps is not counted), at the activation dtype's element size
  // and 4 bytes for the gradients of replicated K/V.
  double forward_bytes = 0;   // Q, K, V out and O back
  double backward_bytes = 0;  // Q, K, V, O, dO out and dQ, dK, dV back
  double buffer_bytes = 0;    // the head-sharded buffers and the two exchange buffers (every layer shares them)
  double replica_bytes = 0;   // of buffer_bytes: K/V heads held beyond the rank's share (0 without replication)
};
// Throws rt::Error unless u divides H (naming H, u and what would work). Hkv must divide H.
// head_groups: 0 picks pipeline_head_groups; else it must divide hk (1: the blocking exchange, used by tests).
HeadExchangeShape head_exchange_shape(const RingAttentionShape& shape, int u, int head_groups = 0);
// The pipeline's depth, config-free: 2 head groups when the hk KV heads split evenly (hk even) and K/V are not
// replicated, else 1. Two groups hide all but half of the exchange's way out and half of its way back behind the
// other half's ring; more groups would hide more but shrink every attention call (fewer heads, one more ring pass
// of hops and per-call overhead each). Groups must own disjoint KV heads, or the backward would sum a KV head's
// dK/dV over groups in another order than the kernel; replicated K/V keep one group for the same reason (their
// f32 sums over ranks must run in one order).
int pipeline_head_groups(int u, int64_t kv_heads, bool replicated);

}  // namespace rt
