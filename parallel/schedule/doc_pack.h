// The document-packed ring order ("docpack"), a candidate of parallel.layout: balanced
// (parallel/schedule/doc_balance.h):
// short documents stay whole and contiguous on one rank, so the kernels see them as one causal block each and
// skip every tile between documents; only long documents are split over the ring.
//   - A document of length L >= split_min, or longer than a rank's T/cp tokens, is cut into 2cp nearly equal
//     pieces, piece c and 2cp-1-c on rank c (zigzag for that document: its pairs fall evenly on every rank at
//     every ring step). A remainder token goes to the ranks with the most room.
//   - The other documents, most pairs first, go whole to the rank with the least step-0 pair load L(L+1)/2 among
//     those with room for them (LPT), so every rank holds the same visible pairs at step 0. With run_max > 0,
//     runs of adjacent short documents of up to run_max tokens go as one item (broken up when none fits): a
//     rank's documents then lie side by side, and a query tile across two of them spans no other rank's keys
//     (which the kernels would have to visit, masked, in every ring step that runs).
//   - A document that fits no rank whole fills the leftover room, cut over the ranks with the most room first
//     (so into few pieces); such documents are the smallest, as they come last.
// Every rank holds exactly T/cp positions, in increasing order (a document's rows contiguous and causal).
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/schedule/ring_spans.h"

namespace rt {

// doc_start (T) by position, T % cp == 0; split_min >= 1. Returns a ring order (T): rank 0's positions, then
// rank 1's, ... O(T + D^2 log D) for D documents at worst (runs broken up), O(T + D log D + D cp) without runs.
std::vector<int64_t> docpack_ring_order(const std::vector<int64_t>& doc_start, int cp, int64_t split_min,
                                        int64_t run_max = 0);

// The same as spans (parallel/schedule/ring_spans.h), from the sample's document_begins: what balanced prices.
std::vector<RingSpan> docpack_ring_spans(const std::vector<int64_t>& begins, int cp, int64_t split_min,
                                         int64_t run_max = 0);

// The split thresholds balanced tries (deduplicated, increasing): 2cp*128 (each piece at least one 128-key tile)
// and T/cp, T/(2cp), T/(4cp), T/(8cp) (a whole document at most that share of a rank), none below 2cp*64 (a
// piece under one 64-row query tile would make every tile it touches partial).
std::vector<int64_t> docpack_split_thresholds(int64_t T, int cp);

}  // namespace rt
