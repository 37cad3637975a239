// The gather layout ("gatherpack"), a candidate of parallel.layout: balanced for the gather scheme
// (parallel/schedule/gather_plan.h). Under gather a rank's time is its own two calls, so the layout must balance each
// rank's
// total mask area while keeping documents whole (a whole document on one rank needs no key from another):
//   1. A document whose mask area exceeds `piece_share` of a rank's share (total area / cp) is cut into 2k equal
//      chunks, k the least that brings each pair under that bound (and its tokens under a rank's), and chunk i goes
//      with chunk 2k-1-i (the zigzag pairing, so each pair carries the same area); other documents stay whole.
//   2. The pieces, largest area first, go each to the rank with the least area so far that has room for all of it
//      (longest-processing-time first, with the token capacity T/cp per rank).
//   3. A piece no rank has room for is poured into the ranks with the most room first (only the last, smallest
//      pieces are ever poured, so few keys cross ranks).
// No document is padded and no length rule is imposed. O(#documents log #documents + cp #pieces).
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/schedule/ring_spans.h"

namespace rt {

// begins: document_begins of a sample (parallel/schedule/ring_spans.h); T = begins.back() must be a multiple of cp.
// Returns the assignment as spans in position order, each rank holding T/cp positions. piece_share > 0: fewer, larger
// pieces as it grows (fewer partial tiles, coarser balance); the chooser prices kGatherPackShares.
std::vector<RingSpan> gather_pack_spans(const std::vector<int64_t>& begins, int cp, double piece_share = 0.5);
constexpr double kGatherPackShares[] = {0.5, 1.0, 2.0};

}  // namespace rt
