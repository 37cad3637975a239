// The ring / gather choice of packed documents (parallel/schedule/cp_scheme.h).
#include "parallel/schedule/cp_scheme.h"

#include "kernels/tensor.h"
#include "parallel/schedule/gather_plan.h"
#include "parallel/schedule/ring_spans.h"
#include "parallel/schedule/ring_tile_cost.h"

namespace rt {

const char* cp_scheme_name(CpScheme scheme) { return scheme == CpScheme::gather ? "gather" : "ring"; }

CpSchemePrediction predict_cp_schemes(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp,
                                      const RingShape& shape) {
  const int64_t T = int64_t(doc_start.size());
  RT_CHECK(int64_t(order.size()) == T && cp >= 1 && T % cp == 0,
           "cp_scheme: a ring order of " << order.size() << " positions for a sample of " << T << " over cp = " << cp);
  const std::vector<int64_t> begins = document_begins(doc_start);
  const std::vector<RingSpan> spans = ring_spans_from_order(order, cp);
  const RingTileCost whole = ring_tile_cost_for_spans(doc_start, {RingSpan{0, T, 0}}, 1);
  CpSchemePrediction p;
  const RingHopPlan hops = ring_hop_plan_for_spans(begins, spans, cp);
  const std::vector<double> runs(hops.visible.begin(), hops.visible.end());  // (cp*cp) calls with a pair
  const RingTileCost tiles = ring_tile_cost_for_rows(doc_start, ring_tile_rows(spans, T, cp), cp, runs);
  p.ring = predict_ring_time(tiles, hops, whole, T / cp, shape);
  const KvGatherPlan plan = kv_gather_plan_for_spans(begins, spans, cp);
  p.gather = predict_gather_time(kv_gather_tiles(doc_start, spans, plan, cp), plan, whole, shape);
  return p;
}

CpScheme pick_cp_scheme(const std::vector<CpSchemePrediction>& samples) {
  double ring = 0, gather = 0;
  for (const CpSchemePrediction& s : samples) ring += s.ring.total_us(), gather += s.gather.total_us();
  return !samples.empty() && gather < ring * (1 - 1e-12) ? CpScheme::gather : CpScheme::ring;
}

}  // namespace rt
