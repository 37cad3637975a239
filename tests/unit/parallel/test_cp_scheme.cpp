// parallel/schedule/cp_scheme.h: the ring's prediction is the one balanced ranks the same layout by (ring_candidates),
// the
// gather's the one parallel/schedule/gather_plan.h gives for the same spans, and auto's rule takes the least sum over a
// batch.
#include <gtest/gtest.h>

#include <random>

#include "kernels/tensor.h"
#include "parallel/schedule/cp_scheme.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/gather_plan.h"

namespace rt {
namespace {

std::vector<int64_t> random_starts(int64_t T, int64_t max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> lengths;
  for (int d = 0; d < 512; ++d) lengths.push_back(1 + int64_t(rng() % uint64_t(max_len)));
  return doc_starts_from_lengths(lengths, T, 0, 0);
}

TEST(CpScheme, PredictionsAreTheChoosersAndTheGatherPlans) {
  RingShape shape;
  shape.heads = 8, shape.kv_heads = 2, shape.head_dim = 128;
  for (int cp : {2, 4, 8})
    for (int64_t max_len : {int64_t(40), int64_t(3000)}) {
      const int64_t T = 8192;
      const std::vector<int64_t> starts = random_starts(T, max_len, uint64_t(cp * 100 + max_len));
      const std::vector<RingCandidate> cands = ring_candidates(starts, cp, shape);
      for (const RingCandidate& c : cands) {
        SCOPED_TRACE(c.label() + " cp=" + std::to_string(cp) + " max_len=" + std::to_string(max_len));
        const CpSchemePrediction p = predict_cp_schemes(starts, c.order, cp, shape);
        EXPECT_NEAR(p.ring.fwd_us, c.time.fwd_us, 1e-9 * c.time.fwd_us);
        EXPECT_NEAR(p.ring.bwd_us, c.time.bwd_us, 1e-9 * c.time.bwd_us);
        EXPECT_EQ(p.ring.bytes_per_layer, c.time.bytes_per_layer);
        const KvGatherPlan plan = kv_gather_plan_for_spans(document_begins(starts), c.spans, cp);
        const RingTimePrediction g = predict_gather_time(kv_gather_tiles(starts, c.spans, plan, cp), plan,
                                                         ring_tile_cost_for_spans(starts, {RingSpan{0, T, 0}}, 1), shape);
        EXPECT_EQ(p.gather.fwd_us, g.fwd_us);
        EXPECT_EQ(p.gather.bwd_us, g.bwd_us);
        EXPECT_EQ(p.gather.bytes_per_layer, g.bytes_per_layer);
        EXPECT_EQ(p.gather.ideal_fwd_us, p.ring.ideal_fwd_us) << "both are held to one whole call / cp";
        EXPECT_LE(p.gather.bytes_per_layer, p.ring.ring_bytes_per_layer);
      }
    }
}

TEST(CpScheme, AutoTakesTheLeastSumOverTheBatchTiesToTheRing) {
  auto sample = [](double ring_us, double gather_us) {
    CpSchemePrediction p;
    p.ring.fwd_us = ring_us / 2, p.ring.bwd_us = ring_us / 2;
    p.gather.fwd_us = gather_us / 4, p.gather.bwd_us = 3 * gather_us / 4;
    return p;
  };
  EXPECT_EQ(pick_cp_scheme({}), CpScheme::ring);
  EXPECT_EQ(pick_cp_scheme({sample(100, 90)}), CpScheme::gather);
  EXPECT_EQ(pick_cp_scheme({sample(100, 110)}), CpScheme::ring);
  EXPECT_EQ(pick_cp_scheme({sample(100, 100)}), CpScheme::ring);
  // One sample prefers the gather by 10, the other the ring by 30: the batch runs one scheme, the ring.
  EXPECT_EQ(pick_cp_scheme({sample(100, 90), sample(100, 130)}), CpScheme::ring);
  EXPECT_EQ(pick_cp_scheme({sample(100, 60), sample(100, 130)}), CpScheme::gather);
  EXPECT_STREQ(cp_scheme_name(CpScheme::gather), "gather");
  EXPECT_STREQ(cp_scheme_name(CpScheme::ring), "ring");
}

TEST(CpScheme, RefusesAnOrderWhoseRanksDoNotIncrease) {
  const int64_t T = 64;
  const std::vector<int64_t> starts = random_starts(T, 9, 5);
  std::vector<int64_t> order = layout_ring_order(Layout::contiguous, T, 2);
  std::swap(order[0], order[1]);
  EXPECT_THROW(predict_cp_schemes(starts, order, 2, RingShape{}), Error);
}

}  // namespace
}  // namespace rt
