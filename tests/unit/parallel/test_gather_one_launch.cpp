// The gather scheme's forward and backward in one launch (parallel/schedule/gather_plan.h gather_fwd_one_launch,
// gather_bwd_one_launch): the rules worked by hand from their formulas, gather_time_from_calls with ranks that run one
// launch (hand-computed), and the prediction on random plans: a rank runs one launch exactly where the rule says, and
// the predicted time is never longer than with every rank's separate calls; the batch forms
// (gather_{fwd,bwd}_one_launch_for_batch) on one and two samples.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "kernels/tensor.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/gather_plan.h"

namespace rt {
namespace {

TEST(GatherOneLaunch, RuleFromItsFormula) {
  // own 300, gathered 100, call 50: one launch c_kv + 350 against max(300, c_kv) + 100.
  EXPECT_TRUE(gather_fwd_one_launch(300, 100, 50, 40));    // 390 < 400
  EXPECT_FALSE(gather_fwd_one_launch(300, 100, 50, 60));   // 410 > 400
  EXPECT_FALSE(gather_fwd_one_launch(300, 100, 50, 50));   // 400 = 400: ties keep the two calls
  // An own call shorter than the exchange: one launch 200 + 30 + 100 - 50 = 280 < 200 + 100.
  EXPECT_TRUE(gather_fwd_one_launch(30, 100, 50, 200));
  EXPECT_FALSE(gather_fwd_one_launch(0, 100, 50, 10)) << "no own call: nothing to fuse";
  EXPECT_FALSE(gather_fwd_one_launch(300, 0, 50, 10)) << "no gathered call: nothing to fuse";
}

TEST(GatherOneLaunch, BackwardRuleFromItsFormula) {
  // Unsplit own call 300 (A = 300, B = 0), gathered 100, call 50: one launch c_kv + 350 + c_dkv against
  // max(300, c_kv) + 100 + c_dkv.
  const OwnBwdSplit whole{0, 300, 0};
  EXPECT_TRUE(gather_bwd_one_launch(whole, 100, 50, 40, 30));   // 420 < 430
  EXPECT_FALSE(gather_bwd_one_launch(whole, 100, 50, 60, 30));  // 440 > 430
  EXPECT_FALSE(gather_bwd_one_launch(whole, 100, 50, 50, 30));  // 430 = 430: ties keep the calls
  // Split at m: A 200, B 150 (own whole 300): three calls max(200, 40) + 100 + max(150, 120) = 450; one launch
  // 40 + 350 + 120 = 510.
  const OwnBwdSplit split{128, 200, 150};
  EXPECT_DOUBLE_EQ(gather_bwd_own_whole_us(split, 50), 300);
  EXPECT_FALSE(gather_bwd_one_launch(split, 100, 50, 40, 120));
  // A short return: 40 + 350 + 10 = 400 < 200 + 100 + 150.
  EXPECT_TRUE(gather_bwd_one_launch(split, 100, 50, 40, 10));
  EXPECT_FALSE(gather_bwd_one_launch(OwnBwdSplit{}, 100, 50, 1, 1)) << "no own call: nothing to fuse";
  EXPECT_FALSE(gather_bwd_one_launch(whole, 0, 50, 1, 1)) << "no gathered call: nothing to fuse";
}

TEST(GatherOneLaunch, TimeFromCallsWithOneLaunch) {
  // Two ranks; rank 1 receives 100 rows from rank 0. K|V rows of 4 bytes, 2 bytes/us after 10 us: C_kv = 210 us.
  KvGatherPlan plan;
  plan.cp = 2, plan.n = 256;
  plan.recv_rows = {0, 100};
  plan.send_rows = {100, 0};
  plan.rows = {0, 0, 100, 0};
  plan.pieces.assign(2, {});
  RingShape shape;
  shape.heads = 1, shape.kv_heads = 1, shape.head_dim = 1, shape.dtype_bytes = 2, shape.dkv_wire_bytes = 4;
  LinkModel link;
  link.bytes_per_us = 2, link.hop_latency_us = 10;
  GatherCallTimes calls;
  calls.own_fwd = {300, 100};
  calls.gathered_fwd = {0, 250};
  calls.own_bwd_a = {400, 400};
  calls.own_bwd_b = {0, 0};
  calls.gathered_bwd = {0, 0};
  EXPECT_DOUBLE_EQ(gather_time_from_calls(calls, plan, shape, link).fwd_us, 460);  // rank 1: max(100, 210) + 250
  calls.one_fwd = {0, 320};  // rank 1 as one launch: 210 + 320
  const RingTimePrediction p = gather_time_from_calls(calls, plan, shape, link);
  EXPECT_DOUBLE_EQ(p.fwd_us, 530);
  EXPECT_DOUBLE_EQ(p.fwd_compute_us, 320);
  calls.one_fwd = {0, 200};  // 410 < 460
  EXPECT_DOUBLE_EQ(gather_time_from_calls(calls, plan, shape, link).fwd_us, 410);
  calls.one_fwd = {0};
  EXPECT_THROW(gather_time_from_calls(calls, plan, shape, link), Error) << "one time per rank or none";
  // The backward: C_dkv = 10 + 100 x 8 / 2 = 410 us. Rank 1 with its calls: max(400, 210) + 0 + max(0, 410) = 810;
  // in one launch of 450: 210 + 450 + 410 = 1070 (rank 0, which sends, waits for the return: 400 + 410).
  calls.one_fwd.clear();
  EXPECT_DOUBLE_EQ(gather_time_from_calls(calls, plan, shape, link).bwd_us, 810);
  calls.one_bwd = {0, 450};
  const RingTimePrediction b = gather_time_from_calls(calls, plan, shape, link);
  EXPECT_DOUBLE_EQ(b.bwd_us, 1070);
  EXPECT_DOUBLE_EQ(b.bwd_compute_us, 450);
  calls.one_bwd = {0, 0, 0};
  EXPECT_THROW(gather_time_from_calls(calls, plan, shape, link), Error) << "one time per rank or none";
}

TEST(GatherOneLaunch, PredictionTakesItWhereTheRuleSays) {
  std::mt19937_64 rng(7);
  int chosen = 0, kept = 0, chosen_bwd = 0, kept_bwd = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int cp = trial % 2 ? 8 : 4;
    const int64_t T = int64_t(cp) * 2048;
    std::vector<int64_t> lengths;
    const int64_t max_len = trial % 3 == 0 ? 600 : 6000;  // short documents: few rows received
    for (int64_t left = T; left > 0;) {
      const int64_t L = std::min(left, 1 + int64_t(rng() % uint64_t(max_len)));
      lengths.push_back(L);
      left -= L;
    }
    const std::vector<int64_t> starts = doc_starts_from_lengths(lengths, T);
    const std::vector<int64_t> order = layout_ring_order(trial % 4 < 2 ? Layout::contiguous : Layout::zigzag, T, cp);
    const std::vector<RingSpan> spans = ring_spans_from_order(order, cp);
    const KvGatherPlan plan = kv_gather_plan_for_spans(document_begins(starts), spans, cp);
    const KvGatherTiles tiles = kv_gather_tiles(starts, spans, plan, cp);
    RingShape shape;
    shape.heads = 16, shape.kv_heads = trial % 2 ? 16 : 4;
    const GatherCallTimes calls = predict_gather_calls(tiles, plan, shape);
    const double c_kv = gather_exchange_us(plan, shape, false), call_us = gather_kernel_time_model(false, 128).call_us;
    ASSERT_EQ(calls.one_fwd.size(), size_t(cp));
    for (int r = 0; r < cp; ++r) {
      const double own = calls.own_fwd[size_t(r)], got = calls.gathered_fwd[size_t(r)];
      const bool rule = plan.recv_rows[size_t(r)] > 0 && gather_fwd_one_launch(own, got, call_us, c_kv);
      EXPECT_EQ(calls.one_fwd[size_t(r)] > 0, rule) << "trial " << trial << " rank " << r;
      if (rule) EXPECT_DOUBLE_EQ(calls.one_fwd[size_t(r)], own + got - call_us);
      (rule ? chosen : kept) += 1;
    }
    // The batch form on one sample (RingAttention::plan_gather's) agrees, and on two copies of it: the tile terms
    // double, the exchange too, the call_us does not.
    const KvGatherTiles both[2] = {tiles, tiles};
    const KvGatherPlan plans[2] = {plan, plan};
    for (int r = 0; r < cp; ++r) {
      EXPECT_EQ(gather_fwd_one_launch_for_batch(&tiles, &plan, 1, r, shape), calls.one_fwd[size_t(r)] > 0)
          << "trial " << trial << " rank " << r;
      const double own = calls.own_fwd[size_t(r)], got = calls.gathered_fwd[size_t(r)];
      const bool twice = plan.recv_rows[size_t(r)] > 0 && own > 0 && got > 0 &&
                         gather_fwd_one_launch(2 * own - call_us, 2 * got - call_us, call_us,
                                               gather_exchange_us(plans, 2, shape, false));
      EXPECT_EQ(gather_fwd_one_launch_for_batch(both, plans, 2, r, shape), twice) << "trial " << trial << " rank " << r;
    }
    // The backward: one launch exactly where gather_bwd_one_launch says with the rank's split, timed as the whole own
    // call + the gathered call - call_us; the batch form on one sample agrees.
    const double bwd_call = gather_kernel_time_model(true, 128).call_us, c_dkv = gather_exchange_us(plan, shape, true);
    ASSERT_EQ(calls.one_bwd.size(), size_t(cp));
    for (int r = 0; r < cp; ++r) {
      const OwnBwdSplit split = predict_own_bwd_split(tiles, plan, r, shape);
      const double got = calls.gathered_bwd[size_t(r)];
      const bool rule = plan.recv_rows[size_t(r)] > 0 && gather_bwd_one_launch(split, got, bwd_call, c_kv, c_dkv);
      EXPECT_EQ(calls.one_bwd[size_t(r)] > 0, rule) << "trial " << trial << " rank " << r;
      if (rule) EXPECT_DOUBLE_EQ(calls.one_bwd[size_t(r)], gather_bwd_own_whole_us(split, bwd_call) + got - bwd_call);
      EXPECT_EQ(gather_bwd_one_launch_for_batch(&tiles, &plan, 1, r, split, shape), rule)
          << "trial " << trial << " rank " << r;
      (rule ? chosen_bwd : kept_bwd) += 1;
    }
    GatherCallTimes two = calls;
    two.one_fwd.clear();
    two.one_bwd.clear();
    const RingTimePrediction with = gather_time_from_calls(calls, plan, shape), without =
                                                                                  gather_time_from_calls(two, plan, shape);
    EXPECT_LE(with.fwd_us, without.fwd_us + 1e-9) << "trial " << trial;
    EXPECT_LE(with.bwd_us, without.bwd_us + 1e-9) << "trial " << trial;
  }
  EXPECT_GT(chosen, 0) << "no rank took one launch: the trials do not test it";
  EXPECT_GT(kept, 0) << "every rank took one launch: the trials do not test the two calls";
  EXPECT_GT(chosen_bwd, 0) << "no rank took the backward in one launch: the trials do not test it";
  EXPECT_GT(kept_bwd, 0) << "every rank took the backward in one launch: the trials do not test the calls";
}

}  // namespace
}  // namespace rt
