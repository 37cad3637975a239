// Packed documents across a ring (DESIGN.md "Document masks"): the visible (query, key) pairs each ring step
// gives each rank, the imbalance metric, and the balanced assignment of a sample's positions to ranks.
// Kernels know nothing of this; RingAttention only needs the positions and document starts it produces.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/schedule/layout.h"
#include "parallel/schedule/ring_hops.h"
#include "parallel/schedule/ring_spans.h"
#include "parallel/schedule/ring_tile_cost.h"
#include "parallel/schedule/ring_time_model.h"

namespace rt {

// Document start of every position of a T-token window of documents with the given lengths, cycled from
// document `first_doc` at `offset` tokens into it (a window's first, partial document starts at position 0).
std::vector<int64_t> doc_starts_from_lengths(const std::vector<int64_t>& lengths, int64_t T, size_t first_doc = 0,
                                             int64_t offset = 0);

// A sample's ring order (T): the positions rank 0 holds (in its local order), then rank 1's, ...
std::vector<int64_t> layout_ring_order(Layout layout, int64_t T, int cp);

// Visible pairs (cp*cp): work[r*cp + s] = pairs (i, j) with i held by rank r, j by rank s and
// doc_start[i] <= j <= i. doc_start (T) by position; order (T) a ring order. O(T*cp).
std::vector<double> ring_pair_counts(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order,
                                     int cp);

// Sum over ring steps t of the max over ranks r of work[r][(r - t) mod cp], divided by the sum over steps of
// the mean over ranks: 1 is perfect; a step waits for its slowest rank. 1 when there is no work.
double ring_imbalance(const std::vector<double>& work, int cp);

// One candidate scheme of balanced and what it is predicted to cost. A ring layout has an order; the chooser
// needs only `time`, so other schemes (an all-to-all, a hybrid) can join with their own prediction and no order.
struct RingCandidate {
  std::string name;                // contiguous, zigzag, striped, doc-striped, docpack, dispatch, gatherpack
  bool gather = false;             // priced for the gather scheme (parallel/schedule/gather_plan.h) instead of the ring
  int64_t split_min = 0;           // docpack: documents at least this long are split over the ring
  int64_t run_max = 0;             // docpack: runs of adjacent short documents up to this many tokens kept together
  double piece_share = 0;          // gatherpack: its piece_share (parallel/schedule/doc_gather_pack.h)
  std::vector<RingSpan> spans;     // the assignment (parallel/schedule/ring_spans.h), what the prediction is made from
  std::vector<int64_t> order;      // (T) ring order, from spans (empty where ring_candidates was told not to)
  RingTileCost tiles;              // ring_tile_cost (parallel/schedule/ring_tile_cost.h); empty for gather
  RingHopPlan hops;                // the hops it needs (parallel/schedule/ring_hops.h); empty for gather
  RingTimePrediction time;         // predicted critical path, fwd and bwd, with communication
  std::string label() const;       // name, with docpack's split_min[/runs] or gatherpack's piece_share, and
                                   // "gather:" before a gather candidate
};

// The candidates of balanced for one sample, each with its predicted time for `shape`: contiguous, zigzag (where
// T % (2*cp) == 0), striped, document-striped (each document dealt round-robin from the rank after the one the
// previous document ended on, the ranks' token counts kept equal), the mask-area dispatch
// (parallel/schedule/doc_dispatch.h),
// and docpack at each docpack_split_thresholds (parallel/schedule/doc_pack.h), with single documents and with runs of
// up to
// T/(4cp) tokens. Each is priced from its spans once (a candidate with the same spans as an earlier one shares its
// prediction); with_orders = false leaves `order` empty (balanced_ring_order expands only the pick).
// with_gather adds the gather scheme (parallel/schedule/gather_plan.h) priced on every distinct assignment but the
// striped
// ones, and on its own layout gatherpack at each kGatherPackShares (parallel/schedule/doc_gather_pack.h).
std::vector<RingCandidate> ring_candidates(const std::vector<int64_t>& doc_start, int cp, const RingShape& shape = {},
                                           bool with_orders = true, bool with_gather = false);

// balanced's rule: the least predicted time, forward + backward (time.total_us()); ties go to the first. No pair
// bound: the kernels' time, not the pair count, decides (bench/NOTES.md "Ring time model").
size_t pick_balanced(const std::vector<RingCandidate>& candidates);

// The pick among ring_candidates (with the gather scheme's when with_gather): its order, label, scheme and time.
struct RingChoice {
  std::vector<int64_t> order;  // (T) ring order
  std::string label;
  bool gather = false;
  RingTimePrediction time;
};
// gather_only: the pick among the gather candidates alone (parallel.cp_scheme: gather).
RingChoice balanced_ring_choice(const std::vector<int64_t>& doc_start, int cp, const RingShape& shape = {},
                                bool with_gather = false, bool gather_only = false);

// parallel.layout: balanced: the ring order pick_balanced takes from ring_candidates. Searched once per sample
// (the loader's job); bench_doc_imbalance prints the time it takes.
std::vector<int64_t> balanced_ring_order(const std::vector<int64_t>& doc_start, int cp, std::string* chosen = nullptr,
                                         const RingShape& shape = {});

// Reads a document-length file: one positive integer per line; '#' starts a comment. Throws rt::Error naming
// the file and line otherwise.
std::vector<int64_t> read_doc_lengths(const std::string& path);

}  // namespace rt
