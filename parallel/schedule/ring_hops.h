// Which K/V blocks a ring of packed documents must ship, and how far (DESIGN.md "Document masks"): a block goes
// only as far downstream as the farthest rank with a query that sees one of its keys, and its dK/dV accumulator
// comes back only from the ranks that used it. Every rank computes the same plan from the sample's positions and
// document starts, so skipping a hop needs no extra message: the sender does not send and the receiver does not
// receive. RingAttention runs it; the layout chooser (parallel/schedule/doc_balance.h) prices it.
//
// The K/V hops (forward and backward): block s's d-th hop (from rank s+d-1 to s+d, d = 1..cp-1) runs iff
// d <= kv_hops[s]. The dK/dV accumulator of block s (backward): made at rank s+1 (its first user), passed on from
// s+d to s+d+1 while d < kv_hops[s], then sent from s+h (h = kv_hops[s]) straight home to s; h = cp-1 is the plain
// ring. h = 0: block s never leaves its rank, and no accumulator travels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rt {

struct RingHopPlan {
  int cp = 1;
  std::vector<uint8_t> visible;  // (cp*cp) visible[r*cp + s]: some query of rank r sees some key of rank s
  std::vector<int> kv_hops;      // (cp) the farthest ring distance d in [0, cp) with visible[(s+d)%cp][s]

  // Whether block `source`'s hop to ring distance `distance` (1..cp-1) runs.
  bool kv_hop(int source, int distance) const { return distance <= kv_hops[std::size_t(((source % cp) + cp) % cp)]; }
  int kv_hop_count() const;   // K/V hops per ring pass (forward; the backward's K/V the same)
  int dkv_hop_count() const;  // dK/dV accumulator hops per backward: kv_hops[s] per block (chain + home)
  // Bytes per layer, forward + backward, given one K/V block's bytes and one dK/dV accumulator's (on the wire).
  double bytes_per_layer(double kv_block_bytes, double dkv_block_bytes) const;
};

// Sets plan->kv_hops from plan->visible (cp*cp, filled) and plan->cp.
void finish_hop_plan(RingHopPlan* plan);

// Every hop (no document mask): the plain ring, kv_hops = cp-1 for every block.
RingHopPlan ring_hop_plan_full(int cp);

// From the whole batch in ring order, as RingAttention::set_documents takes it: pos and doc_start (B, T) host
// arrays, rank s's n = T/cp tokens at columns [s*n, (s+1)*n); each row's positions a permutation of [0, T).
// The plan covers every sample of the batch (a hop runs if any sample needs it). O(B*T). Throws rt::Error naming
// the sample and position when positions are not a permutation or a document start is after its position.
RingHopPlan ring_hop_plan(const int64_t* pos, const int64_t* doc_start, int64_t batch, int64_t T, int cp);

// The same for one sample given by position: doc_start (T) by position, order (T) a ring order.
RingHopPlan ring_hop_plan_for_order(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp);

}  // namespace rt
