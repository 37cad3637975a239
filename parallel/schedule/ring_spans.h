// A ring assignment of a sample's positions as spans (DESIGN.md "Document masks"): runs of consecutive positions
// held by one rank, in position order. Every layout balanced builds (parallel/schedule/doc_balance.h) gives each rank
// increasing positions, so the spans say all a ring order says in O(#spans) instead of O(T): the chooser prices
// its candidates from them (their hops here, their tiles in parallel/schedule/ring_tile_cost.h) and expands only the
// pick.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/schedule/ring_hops.h"

namespace rt {

struct RingSpan {
  int64_t begin = 0, len = 0;  // positions [begin, begin + len)
  int rank = 0;                // held by this rank
  bool operator==(const RingSpan& o) const { return begin == o.begin && len == o.len && rank == o.rank; }
};

// The documents of a sample: the first position of each, increasing, and T. doc_start (T) by position, each
// document's positions consecutive (doc_start[p] is p or doc_start[p - 1]); throws rt::Error naming the position
// otherwise. begins has one entry per document plus T at the end.
std::vector<int64_t> document_begins(const std::vector<int64_t>& doc_start);

// The spans of a ring order (T): rank r's n = T/cp positions at order[r*n, (r+1)*n), which must increase (every
// layout of parallel/schedule/layout.h and balanced's candidates do); throws rt::Error naming the rank otherwise.
// Adjacent
// positions of one rank form one span.
std::vector<RingSpan> ring_spans_from_order(const std::vector<int64_t>& order, int cp);

// The ring order (T) of spans in position order covering [0, T), each rank holding T/cp positions.
std::vector<int64_t> ring_order_from_spans(const std::vector<RingSpan>& spans, int64_t T, int cp);

// ring_hop_plan_for_order of the spans' order, in O(#spans + #documents), from the sample's document_begins.
RingHopPlan ring_hop_plan_for_spans(const std::vector<int64_t>& begins, const std::vector<RingSpan>& spans, int cp);

}  // namespace rt
