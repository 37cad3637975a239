// The mask-area dispatch ("dispatch"), a candidate of parallel.layout: balanced (parallel/schedule/doc_balance.h),
// after
// MagiAttention's dispatch solver: the sample is cut into equal chunks (no padding, no length rule on documents),
// and the chunks, largest mask area first, go greedily each to the rank (with room) that keeps the ring's critical
// path least: the sum over ring steps of the slowest rank's predicted time, a call costing a fixed part plus its
// visible pairs (weights of their own, doc_dispatch.cpp says why). Each rank's chunks keep increasing positions.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/schedule/ring_spans.h"
#include "parallel/schedule/ring_time_model.h"

namespace rt {

// The chunk size dispatch uses for T tokens over cp ranks: the largest divisor of T/cp that is at most
// max(128, T/cp/16) (so every rank holds a whole number of chunks, 16 or more where T/cp allows).
int64_t dispatch_chunk_tokens(int64_t T, int cp);

// doc_start (T) by position, T % cp == 0. Returns a ring order (T): rank 0's positions, then rank 1's, ...
// O(M^2 cp) for M = T / chunk chunks at worst (one document), O(M cp^3) without long documents.
std::vector<int64_t> dispatch_ring_order(const std::vector<int64_t>& doc_start, int cp, int64_t chunk = 0);

}  // namespace rt

namespace rt {

// The same as spans (parallel/schedule/ring_spans.h), from the sample's document_begins: what balanced prices. `model`:
// the
// forward kernel model whose call_us and full_us weigh the greedy's calls (null: the greedy's own weights);
// bench_doc_imbalance --features passes the coefficients a measured dispatch was planned with.
std::vector<RingSpan> dispatch_ring_spans(const std::vector<int64_t>& begins, int cp, int64_t chunk = 0,
                                          const KernelTimeModel* model = nullptr);

}  // namespace rt
