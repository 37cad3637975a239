// How a ring of packed documents moves K/V (DESIGN.md "Document masks"), chosen per batch:
//   ring:   K/V blocks pass around the ring step by step, skipping the hops nobody downstream needs
//           (parallel/schedule/ring_hops.h); dK/dV travel back along the block's users.
//   gather: every rank receives from every other rank exactly the key rows its queries see, in one exchange, and runs
//           two calls (its own keys while the exchange is in flight, then the gathered rows); dK/dV of the gathered
//           rows go back to their owners in a reverse exchange (parallel/schedule/gather_plan.h,
//           parallel/cp/ring_attention_gather.cpp).
// parallel.cp_scheme: auto picks per batch the one of least predicted forward + backward time, from the same time
// model (parallel/schedule/ring_time_model.h) that ranks the layouts. Host only; every rank of a ring decides alike.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/schedule/ring_time_model.h"

namespace rt {

enum class CpScheme { ring, gather };
const char* cp_scheme_name(CpScheme scheme);

// One sample's two predictions for a ring order (its ranks' positions increasing, as every layout gives).
struct CpSchemePrediction {
  RingTimePrediction ring, gather;
};
// doc_start (T) by position, order (T) the ring order (rank 0's positions, then rank 1's, ...), cp ranks, shape per
// rank as RingAttention runs it. Throws rt::Error (ring_spans_from_order) when a rank's positions do not increase.
CpSchemePrediction predict_cp_schemes(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp,
                                      const RingShape& shape);

// auto's rule over a batch's samples: gather when the sum over the samples of its forward + backward time is less
// than the ring's (RingAttention runs a batch's samples in one call); ties and an empty batch go to the ring.
CpScheme pick_cp_scheme(const std::vector<CpSchemePrediction>& samples);

}  // namespace rt
