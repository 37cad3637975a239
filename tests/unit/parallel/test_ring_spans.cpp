// parallel/schedule/ring_spans.h and the chooser's fast path: balanced prices its candidates from spans (their hops,
// their
// tiles in one sweep per call, fixed layouts' tiles in closed form, shared document begins, duplicates priced once).
// Here a straightforward reference -- every candidate's full ring order built, its hops from ring_hop_plan_for_order
// and its tiles from ring_tile_cost (both O(T) per candidate and general) -- must give every candidate the very same
// prediction and balanced the very same pick and order, on seeded mixes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/tensor.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/doc_dispatch.h"
#include "parallel/schedule/doc_pack.h"
#include "parallel/schedule/ring_spans.h"

namespace rt {
namespace {

struct Reference {
  std::string label;
  std::vector<int64_t> order;  // (T)
  RingTimePrediction time;
};

// The chooser as first written: each candidate's order in full, priced by the general O(T) functions.
std::vector<Reference> reference_candidates(const std::vector<int64_t>& doc_start, int cp) {
  const int64_t T = int64_t(doc_start.size()), n = T / cp;
  std::vector<int64_t> natural(static_cast<size_t>(T));  // (T)
  std::iota(natural.begin(), natural.end(), int64_t(0));
  const RingTileCost whole = ring_tile_cost(doc_start, natural, 1);
  std::vector<Reference> out;
  auto add = [&](const std::string& label, std::vector<int64_t> order) {
    const RingHopPlan hops = ring_hop_plan_for_order(doc_start, order, cp);
    const std::vector<double> runs(hops.visible.begin(), hops.visible.end());
    const RingTileCost tiles = ring_tile_cost(doc_start, order, cp, runs);
    out.push_back({label, std::move(order), predict_ring_time(tiles, hops, whole, n, RingShape{})});
  };
  add("contiguous", layout_ring_order(Layout::contiguous, T, cp));
  if (T % (2 * int64_t(cp)) == 0) add("zigzag", layout_ring_order(Layout::zigzag, T, cp));
  add("striped", layout_ring_order(Layout::striped, T, cp));
  {  // doc-striped, per position: round-robin, a full rank passed over
    std::vector<std::vector<int64_t>> held(static_cast<size_t>(cp));
    int next = 0;
    for (int64_t p = 0; p < T; ++p) {
      while (int64_t(held[size_t(next)].size()) == n) next = (next + 1) % cp;
      held[size_t(next)].push_back(p);
      next = (next + 1) % cp;
    }
    std::vector<int64_t> order;
    for (const auto& h : held) order.insert(order.end(), h.begin(), h.end());
    add("doc-striped", order);
  }
  add("dispatch", dispatch_ring_order(doc_start, cp));
  for (int64_t split_min : docpack_split_thresholds(T, cp))
    for (int64_t run_max : {int64_t(0), T / cp / 4})
      add("docpack(" + std::to_string(split_min) + (run_max ? "/runs)" : ")"),
          docpack_ring_order(doc_start, cp, split_min, run_max));
  return out;
}

std::vector<std::vector<int64_t>> seeded_mixes() {
  std::vector<std::vector<int64_t>> mixes;
  mixes.push_back(read_doc_lengths(RT_TEST_DATA_DIR "/python_stdlib_doc_lengths.txt"));
  std::mt19937_64 rng(8);
  std::vector<int64_t> short_mix, short_long, tiny, lognormal;
  for (int d = 0; d < 4096; ++d) {
    short_mix.push_back(1024 + int64_t(rng() % 3073));
    short_long.push_back(rng() % 4 == 0 ? 8192 + int64_t(rng() % 24577) : 1024 + int64_t(rng() % 3073));
    tiny.push_back(1 + int64_t(rng() % 700));
  }
  std::lognormal_distribution<double> ln(std::log(2048.0), 1.5);
  for (int d = 0; d < 4096; ++d) lognormal.push_back(std::max<int64_t>(1, std::min<int64_t>(1 << 20, int64_t(ln(rng)))));
  for (auto* m : {&short_mix, &short_long, &tiny, &lognormal}) mixes.push_back(*m);
  mixes.push_back({int64_t(1) << 30});  // one document per sample
  return mixes;
}

TEST(RingSpans, FastChooserPicksWhatTheReferencePicks) {
  const std::vector<std::vector<int64_t>> mixes = seeded_mixes();
  for (size_t m = 0; m < mixes.size(); ++m)
    for (int64_t T : {int64_t(4096), int64_t(16384), int64_t(65536)})
      for (int cp : {2, 4, 8})
        for (uint64_t k = 0; k < 2; ++k) {
          std::mt19937_64 pick(500 + k);
          const size_t doc = size_t(pick() % mixes[m].size());
          const std::vector<int64_t> starts =
              doc_starts_from_lengths(mixes[m], T, doc, int64_t(pick() % uint64_t(std::min<int64_t>(mixes[m][doc], 1 << 20))));
          const std::string where = "mix " + std::to_string(m) + " T=" + std::to_string(T) + " cp=" + std::to_string(cp) +
                                    " sample " + std::to_string(k);
          const std::vector<Reference> ref = reference_candidates(starts, cp);
          const std::vector<RingCandidate> fast = ring_candidates(starts, cp);
          ASSERT_EQ(fast.size(), ref.size()) << where;
          size_t ref_best = 0;
          for (size_t c = 0; c < ref.size(); ++c) {
            EXPECT_EQ(fast[c].label(), ref[c].label) << where;
            EXPECT_EQ(fast[c].order, ref[c].order) << where << " " << ref[c].label;
            EXPECT_EQ(fast[c].time.fwd_us, ref[c].time.fwd_us) << where << " " << ref[c].label;
            EXPECT_EQ(fast[c].time.bwd_us, ref[c].time.bwd_us) << where << " " << ref[c].label;
            EXPECT_EQ(fast[c].time.bytes_per_layer, ref[c].time.bytes_per_layer) << where << " " << ref[c].label;
            EXPECT_EQ(fast[c].time.ideal_fwd_us, ref[c].time.ideal_fwd_us) << where;
            if (ref[c].time.total_us() < ref[ref_best].time.total_us() * (1 - 1e-12)) ref_best = c;
          }
          std::string chosen;
          EXPECT_EQ(balanced_ring_order(starts, cp, &chosen), ref[ref_best].order) << where;
          EXPECT_EQ(chosen, ref[ref_best].label) << where;
        }
}

TEST(RingSpans, SpansRoundTripAndPriceLikeTheOrder) {
  const int64_t T = 6144;
  const int cp = 4;
  std::mt19937_64 rng(11);
  const std::vector<int64_t> starts = doc_starts_from_lengths({300, 17, 1, 2000, 90, 64, 700}, T, 2, 5);
  for (int trial = 0; trial < 6; ++trial) {
    // A random assignment, each rank's positions increasing.
    std::vector<int64_t> perm(static_cast<size_t>(T));
    std::iota(perm.begin(), perm.end(), int64_t(0));
    std::shuffle(perm.begin(), perm.end(), rng);
    if (trial == 0) std::iota(perm.begin(), perm.end(), int64_t(0));  // contiguous
    const int64_t n = T / cp;
    for (int r = 0; r < cp; ++r) std::sort(perm.begin() + r * n, perm.begin() + (r + 1) * n);
    const std::vector<RingSpan> spans = ring_spans_from_order(perm, cp);
    ASSERT_EQ(ring_order_from_spans(spans, T, cp), perm);
    const RingHopPlan slow = ring_hop_plan_for_order(starts, perm, cp);
    const RingHopPlan fast = ring_hop_plan_for_spans(document_begins(starts), spans, cp);
    EXPECT_EQ(fast.visible, slow.visible) << "trial " << trial;
    EXPECT_EQ(fast.kv_hops, slow.kv_hops) << "trial " << trial;
    const std::vector<double> runs(slow.visible.begin(), slow.visible.end());
    const RingTileCost a = ring_tile_cost(starts, perm, cp, runs), b = ring_tile_cost_for_spans(starts, spans, cp, runs);
    EXPECT_EQ(a.tiles, b.tiles) << "trial " << trial;
    EXPECT_EQ(a.full_tiles, b.full_tiles) << "trial " << trial;
    EXPECT_EQ(a.partial_tiles, b.partial_tiles) << "trial " << trial;
    EXPECT_EQ(a.active, b.active) << "trial " << trial;
    EXPECT_EQ(a.critical, b.critical) << "trial " << trial;
  }
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
    const RingTileRows closed = ring_tile_rows(l, T, cp);
    const RingTileRows walked = ring_tile_rows(ring_spans_from_order(layout_ring_order(l, T, cp), cp), T, cp);
    EXPECT_EQ(closed.query, walked.query) << layout_name(l);
    EXPECT_EQ(closed.key, walked.key) << layout_name(l);
  }
}

TEST(RingSpans, BadInputIsRefusedWithItsPosition) {
  std::vector<int64_t> order = {0, 1, 3, 2};  // rank 1 holds 3 then 2: not increasing
  try {
    ring_spans_from_order(order, 2);
    FAIL() << "a rank with decreasing positions was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  try {
    document_begins({0, 0, 2, 0});  // position 3 goes back to document 0
    FAIL() << "a document start that goes back was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rt
