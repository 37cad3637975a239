// Packed documents across a ring (DESIGN.md "Document masks"): the visible (query, key) pairs each ring step
// gives each rank, the imbalance metric, and the balanced assignment of a sample's positions to ranks.
// Kernels know nothing of this; RingAttention only needs the positions and document starts it produces.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/layout.h"
#include "parallel/ring_tile_cost.h"

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

// One candidate ring order of balanced and what it costs: visible pairs and the kernels' tiles per (rank, step).
struct RingCandidate {
  std::string name;                // zigzag, striped, doc-striped or docpack
  int64_t split_min = 0;           // docpack: documents at least this long are split over the ring
  int64_t run_max = 0;             // docpack: runs of adjacent short documents up to this many tokens kept together
  std::vector<int64_t> order;      // (T) ring order
  std::vector<double> pairs;       // (cp*cp) ring_pair_counts
  double pair_imbalance = 1;       // ring_imbalance(pairs)
  RingTileCost tiles;              // ring_tile_cost (parallel/ring_tile_cost.h)
};

// The pair imbalance a candidate may have and still be chosen for its tile cost (the bound).
constexpr double kBalancedMaxImbalance = 1.10;

// The candidates of balanced for one sample: zigzag (where T % (2*cp) == 0), striped, document-striped (each
// document dealt round-robin from the rank after the one the previous document ended on, the ranks' token counts
// kept equal) and docpack at each docpack_split_thresholds (parallel/doc_pack.h), with single documents and with
// runs of up to T/(4cp) tokens, each with its costs.
std::vector<RingCandidate> ring_candidates(const std::vector<int64_t>& doc_start, int cp);

// How much cheaper (tile critical path) a docpack candidate must be predicted than the best fixed layout to be
// chosen: the tile model's error on the H200 (bench/results/2026-12-01-doc-imbalance.md, "Measured on the H200").
// It predicted docpack 11% ahead of striped on the stdlib mix at 128K, cp = 8, and docpack measured 22% behind;
// where it predicted 2.6x ahead (1-4K documents at 128K), docpack measured 2.1x ahead (forward; 1.6x backward).
constexpr double kDocpackMargin = 0.8;

// balanced's rule: among candidates with pair_imbalance <= kBalancedMaxImbalance, the least tiles.critical (the
// sum over ring steps of the slowest rank's tile cost: the kernels' critical path) of the fixed layouts (zigzag,
// striped, doc-striped; ties go to the first), replaced by the least-critical docpack candidate when that is below
// kDocpackMargin x it. When none qualifies, the least pair_imbalance.
size_t pick_balanced(const std::vector<RingCandidate>& candidates);

// parallel.layout: balanced: the ring order pick_balanced takes from ring_candidates. Searched once per sample
// (the loader's job); bench_doc_imbalance prints the time it takes.
std::vector<int64_t> balanced_ring_order(const std::vector<int64_t>& doc_start, int cp, std::string* chosen = nullptr);

// Reads a document-length file: one positive integer per line; '#' starts a comment. Throws rt::Error naming
// the file and line otherwise.
std::vector<int64_t> read_doc_lengths(const std::string& path);

}  // namespace rt
