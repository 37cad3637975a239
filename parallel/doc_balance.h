// Packed documents across a ring (DESIGN.md "Document masks"): the visible (query, key) pairs each ring step
// gives each rank, the imbalance metric, and the balanced assignment of a sample's positions to ranks.
// Kernels know nothing of this; RingAttention only needs the positions and document starts it produces.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/layout.h"

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

// parallel.layout: balanced. The ring order of the candidates (zigzag where T % (2*cp) == 0, striped, and
// document-striped: each document dealt round-robin from the rank after the one the previous document ended on,
// with the ranks' token counts kept equal) with the least imbalance for this sample's documents; ties go to the
// first. Searched once per sample (the loader's job); O(T*cp) per candidate.
std::vector<int64_t> balanced_ring_order(const std::vector<int64_t>& doc_start, int cp, std::string* chosen = nullptr);

// Reads a document-length file: one positive integer per line; '#' starts a comment. Throws rt::Error naming
// the file and line otherwise.
std::vector<int64_t> read_doc_lengths(const std::string& path);

}  // namespace rt
