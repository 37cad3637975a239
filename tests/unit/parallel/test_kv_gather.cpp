// parallel/schedule/gather_plan.h: the gather scheme's plan against a brute force over every (query, key) pair: each
// rank
// receives every key of another rank that one of its queries sees (a needed row never left out), and nothing else
// (no unneeded row), each piece naming the right rows of its source; plus the bytes it saves on a short-document mix
// and the time model's limits; the query rows the gathered call runs on (gathered_query_rows) against the same
// brute force.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/doc_dispatch.h"
#include "parallel/schedule/doc_gather_pack.h"
#include "parallel/schedule/gather_plan.h"

namespace rt {
namespace {

// Every key position rank r must receive: held by another rank, seen by a query of r. O(T^2 / cp) pairs.
std::set<int64_t> needed_keys(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp,
                              int r) {
  const int64_t T = int64_t(order.size()), n = T / cp;
  std::vector<int> owner(static_cast<size_t>(T));  // (T)
  for (int s = 0; s < cp; ++s)
    for (int64_t i = 0; i < n; ++i) owner[size_t(order[size_t(s * n + i)])] = s;
  std::set<int64_t> keys;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t q = order[size_t(r * n + i)];
    for (int64_t k = doc_start[size_t(q)]; k <= q; ++k)
      if (owner[size_t(k)] != r) keys.insert(k);
  }
  return keys;
}

void expect_exact(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp,
                  const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t T = int64_t(order.size()), n = T / cp;
  const KvGatherPlan plan = kv_gather_plan_for_order(doc_start, order, cp);
  ASSERT_EQ(plan.cp, cp);
  ASSERT_EQ(plan.n, n);
  int64_t sent = 0;
  for (int s = 0; s < cp; ++s) sent += plan.send_rows[size_t(s)];
  EXPECT_EQ(sent, plan.total_rows());
  for (int r = 0; r < cp; ++r) {
    const std::set<int64_t> want = needed_keys(doc_start, order, cp, r);
    const std::vector<int64_t> got = kv_gather_positions(plan, r);
    EXPECT_EQ(int64_t(got.size()), plan.recv_rows[size_t(r)]);
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << "rank " << r << ": gathered rows not in position order";
    EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), want) << "rank " << r;
    EXPECT_EQ(got.size(), want.size()) << "rank " << r << ": a row received twice";
    // The query rows the gathered call runs on: exactly from the first to the last row that sees another rank's key.
    std::vector<int64_t> q_pos(static_cast<size_t>(n)), q_start(static_cast<size_t>(n));  // (n) rank r's rows
    QueryRowRange brute;
    for (int64_t i = 0; i < n; ++i) {
      q_pos[size_t(i)] = order[size_t(r * n + i)];
      q_start[size_t(i)] = doc_start[size_t(q_pos[size_t(i)])];
      bool sees = false;
      for (int64_t k = q_start[size_t(i)]; k <= q_pos[size_t(i)] && !sees; ++k) sees = want.count(k) > 0;
      if (sees) brute = row_range_union(brute, {i, i + 1});
    }
    const QueryRowRange range = gathered_query_rows(q_pos.data(), q_start.data(), n, got);
    EXPECT_EQ(range.empty(), got.empty()) << "rank " << r;
    EXPECT_EQ(range.lo, brute.lo) << "rank " << r;
    EXPECT_EQ(range.hi, brute.hi) << "rank " << r;
    int64_t dst = 0;
    for (const KvGatherPiece& p : plan.pieces[size_t(r)]) {
      ASSERT_NE(p.source, r);
      EXPECT_EQ(p.dst_row, dst);
      dst += p.len;
      ASSERT_LE(p.src_row + p.len, n);
      for (int64_t i = 0; i < p.len; ++i)
        ASSERT_EQ(order[size_t(p.source * n + p.src_row + i)], p.pos + i)
            << "rank " << r << " piece from rank " << p.source << " row " << p.src_row + i;
    }
  }
}

std::vector<int64_t> random_lengths(std::mt19937_64& rng, int64_t T, int64_t max_len, bool with_ones) {
  std::vector<int64_t> lengths;
  int64_t left = T;
  while (left > 0) {
    int64_t L = with_ones && rng() % 4 == 0 ? 1 : 1 + int64_t(rng() % uint64_t(max_len));
    L = std::min(L, left);
    lengths.push_back(L);
    left -= L;
  }
  return lengths;
}

TEST(KvGather, EveryNeededRowAndNoOtherOnEveryLayout) {
  std::mt19937_64 rng(20261202);
  for (int cp : {2, 3, 4, 8})
    for (int64_t T : {int64_t(cp) * 48, int64_t(cp) * 130})
      for (int64_t max_len : {int64_t(1), int64_t(7), int64_t(61), T}) {
        const std::vector<int64_t> lengths = random_lengths(rng, T, max_len, max_len > 1);
        const std::vector<int64_t> starts = doc_starts_from_lengths(lengths, T);
        const std::string mix = "cp " + std::to_string(cp) + " T " + std::to_string(T) + " max " +
                                std::to_string(max_len);
        for (Layout l : {Layout::contiguous, Layout::striped, Layout::zigzag}) {
          if (l == Layout::zigzag && T % (2 * cp) != 0) continue;
          expect_exact(starts, layout_ring_order(l, T, cp), cp, mix + " " + layout_name(l));
        }
        expect_exact(starts, dispatch_ring_order(starts, cp, T / cp / 2), cp, mix + " dispatch");
        expect_exact(starts, balanced_ring_order(starts, cp), cp, mix + " balanced");
      }
}

TEST(KvGather, OneDocumentSpanningEveryRankGathersEverythingBefore) {
  const int cp = 4;
  const int64_t T = 4 * 33;  // odd rows per rank
  const std::vector<int64_t> one(size_t(T), 0);
  const KvGatherPlan plan = kv_gather_plan_for_order(one, layout_ring_order(Layout::contiguous, T, cp), cp);
  for (int r = 0; r < cp; ++r) EXPECT_EQ(plan.recv_rows[size_t(r)], 33 * r) << "rank " << r;
  EXPECT_EQ(plan.send_rows[0], 33 * 3);
  EXPECT_EQ(plan.send_rows[3], 0);
}

TEST(KvGather, ShortDocumentsMoveAFractionOfTheRing) {
  // 4096 tokens in documents of 1..63 under contiguous: only documents that straddle a rank boundary need rows.
  const int cp = 8;
  const int64_t T = 4096, n = T / cp;
  std::mt19937_64 rng(7);
  const std::vector<int64_t> starts = doc_starts_from_lengths(random_lengths(rng, T, 63, true), T);
  const KvGatherPlan plan = kv_gather_plan_for_order(starts, layout_ring_order(Layout::contiguous, T, cp), cp);
  const int64_t ring_rows = int64_t(cp) * (cp - 1) * n;  // every block to every other rank
  EXPECT_GT(plan.total_rows(), 0);
  EXPECT_LE(plan.total_rows(), int64_t(cp - 1) * 62);  // at most one straddling document per boundary
  EXPECT_LT(plan.bytes_per_layer(1, 1) * 20, double(ring_rows) * 3) << "expected under 5% of the ring's rows";
  for (int r = 1; r < cp; ++r) EXPECT_EQ(plan.rows[size_t(r * cp + r)], 0);
}

TEST(KvGather, OneRankPredictsTheWholeCall) {
  const int64_t T = 2048;
  std::mt19937_64 rng(3);
  const std::vector<int64_t> starts = doc_starts_from_lengths(random_lengths(rng, T, 300, false), T);
  std::vector<int64_t> natural(static_cast<size_t>(T));  // (T)
  std::iota(natural.begin(), natural.end(), int64_t(0));
  const std::vector<RingSpan> spans = ring_spans_from_order(natural, 1);
  const KvGatherPlan plan = kv_gather_plan_for_spans(document_begins(starts), spans, 1);
  EXPECT_EQ(plan.total_rows(), 0);
  const RingTileCost whole = ring_tile_cost(starts, natural, 1);
  const RingTimePrediction p = predict_gather_time(kv_gather_tiles(starts, spans, plan, 1), plan, whole, RingShape{});
  // One rank's scheme is its own call over the whole sample, priced by the gather calls' model.
  auto whole_us = [&](bool backward) {
    return call_time_us(gather_kernel_time_model(backward, 128), whole.full_tiles[0], whole.partial_tiles[0],
                        whole.active[0], RingShape{}.heads);
  };
  EXPECT_NEAR(p.fwd_us, whole_us(false), 1e-6);
  EXPECT_NEAR(p.bwd_us, whole_us(true), 1e-6);
  EXPECT_EQ(p.bytes_per_layer, 0);
}

TEST(KvGather, GatheredTilesMatchTheVisiblePairs) {
  // Every pair of a full tile is visible, so the gathered call's full tiles hold at most the visible pairs of rank r
  // against the other ranks; its own call is the ring's step 0; a rank runs the gathered call iff it receives.
  const int cp = 8;
  const int64_t T = 8192;
  std::mt19937_64 rng(11);
  const std::vector<int64_t> starts = doc_starts_from_lengths(random_lengths(rng, T, 1500, false), T);
  const std::vector<int64_t> order = dispatch_ring_order(starts, cp);
  const std::vector<RingSpan> spans = ring_spans_from_order(order, cp);
  const KvGatherPlan plan = kv_gather_plan_for_spans(document_begins(starts), spans, cp);
  const KvGatherTiles g = kv_gather_tiles(starts, spans, plan, cp);
  const std::vector<double> pairs = ring_pair_counts(starts, order, cp);
  const RingTileCost ring = ring_tile_cost(starts, order, cp, pairs);
  double gathered_full = 0;
  for (int r = 0; r < cp; ++r) {
    double remote_pairs = 0;
    for (int s = 0; s < cp; ++s)
      if (s != r) remote_pairs += pairs[size_t(r * cp + s)];
    const double full = g.gathered.full_tiles[size_t(r * cp + r)];
    gathered_full += full;
    EXPECT_LE(full * double(kCostQueryTileRows * kCostKeyTileRows), remote_pairs + 1e-9) << "rank " << r;
    EXPECT_EQ(g.own.full_tiles[size_t(r * cp + r)], ring.full_tiles[size_t(r * cp + r)]) << "rank " << r;
    EXPECT_EQ(bool(g.gathered.runs[size_t(r * cp + r)]), plan.recv_rows[size_t(r)] > 0) << "rank " << r;
  }
  EXPECT_GT(gathered_full, 0) << "documents up to 1500 long over 1024-token ranks must give full remote tiles";
}

TEST(KvGather, MeasuredCallsHideTheExchangeOnlyBehindLongerOwnCalls) {
  // gather_time_from_calls (what bench_doc_ring_steps applies to measured calls): the exchange C_kv overlaps each
  // receiving rank's own call, the gradients' return C_dkv is exposed; a rank that receives nothing never waits.
  const int cp = 4;
  const int64_t T = 4 * 256;
  std::mt19937_64 rng(5);
  const std::vector<int64_t> starts = doc_starts_from_lengths(random_lengths(rng, T, 400, false), T);
  const KvGatherPlan plan = kv_gather_plan_for_order(starts, layout_ring_order(Layout::contiguous, T, cp), cp);
  ASSERT_EQ(plan.recv_rows[0], 0);  // contiguous: rank 0 holds the first positions
  RingShape shape;
  shape.heads = 32, shape.kv_heads = 8;
  const double c_kv = gather_exchange_us(plan, shape, false), c_dkv = gather_exchange_us(plan, shape, true);
  ASSERT_GT(c_kv, 0);
  EXPECT_GT(c_dkv, c_kv) << "f32 gradients on the wire weigh more than bf16 K/V";
  std::uniform_real_distribution<double> u(0.1, 1.0);
  for (bool long_own : {true, false}) {
    GatherCallTimes calls;
    double compute_f = 0, compute_b = 0;
    for (int r = 0; r < cp; ++r) {
      const double scale = long_own ? 2 * c_dkv : 0.1 * c_kv;  // own calls longer than both exchanges, or shorter
      calls.own_fwd.push_back(scale * (1 + u(rng)));
      calls.own_bwd_a.push_back(scale * (1 + u(rng)));  // one own call (no split): part B 0
      calls.own_bwd_b.push_back(0.0);
      calls.gathered_fwd.push_back(plan.recv_rows[size_t(r)] > 0 ? c_kv * u(rng) : 0.0);
      calls.gathered_bwd.push_back(plan.recv_rows[size_t(r)] > 0 ? c_kv * u(rng) : 0.0);
      compute_f = std::max(compute_f, calls.own_fwd.back() + calls.gathered_fwd.back());
      compute_b = std::max(compute_b, calls.own_bwd_a.back() + calls.gathered_bwd.back());
    }
    const RingTimePrediction p = gather_time_from_calls(calls, plan, shape);
    SCOPED_TRACE(long_own ? "own calls hide the exchange" : "the exchange is exposed");
    EXPECT_DOUBLE_EQ(p.fwd_compute_us, compute_f);
    EXPECT_DOUBLE_EQ(p.bwd_compute_us, compute_b);
    EXPECT_GE(p.bwd_us, compute_b + c_dkv - 1e-9);
    if (long_own) {
      EXPECT_DOUBLE_EQ(p.fwd_us, compute_f);
      EXPECT_DOUBLE_EQ(p.bwd_us, compute_b + c_dkv);
    } else {
      double want = calls.own_fwd[0];  // rank 0 receives nothing: its own call alone
      for (int r = 1; r < cp; ++r)
        want = std::max(want, (plan.recv_rows[size_t(r)] > 0 ? c_kv : calls.own_fwd[size_t(r)]) +
                                  calls.gathered_fwd[size_t(r)]);
      EXPECT_DOUBLE_EQ(p.fwd_us, want);
      EXPECT_GT(p.fwd_us, compute_f);
    }
    EXPECT_EQ(p.bytes_per_layer, plan.bytes_per_layer(2.0 * 8 * 128 * 2, 2.0 * 8 * 128 * 4));
    EXPECT_EQ(p.ring_bytes_per_layer,
              double(cp) * (cp - 1) * double(plan.n) * (2.0 * 8 * 128 * 2 * 2 + 2.0 * 8 * 128 * 4))
        << "the plain ring: every block to every other rank, fwd + bwd K/V and the dK/dV home";
  }
}

}  // namespace
}  // namespace rt

namespace rt {
namespace {

// gatherpack (parallel/schedule/doc_gather_pack.h): a valid assignment (T/cp increasing positions per rank), short
// documents
// kept whole but for the few poured last, and the mask area balanced where one document must be spread.
TEST(GatherPack, ValidAndBalancedAndKeepsShortDocumentsWhole) {
  std::mt19937_64 rng(5);
  for (int cp : {2, 4, 8}) {
    const int64_t T = int64_t(cp) * 1024;
    const std::vector<int64_t> lengths = random_lengths(rng, T, 200, true);
    const std::vector<int64_t> starts = doc_starts_from_lengths(lengths, T);
    const std::vector<int64_t> begins = document_begins(starts);
    const std::vector<RingSpan> spans = gather_pack_spans(begins, cp);
    const std::vector<int64_t> order = ring_order_from_spans(spans, T, cp);  // throws unless T/cp per rank
    expect_exact(starts, order, cp, "gatherpack cp " + std::to_string(cp));
    size_t split = 0;  // documents on more than one rank
    for (size_t d = 0; d + 1 < begins.size(); ++d) {
      std::set<int> ranks;
      for (const RingSpan& s : spans)
        if (s.begin < begins[d + 1] && s.begin + s.len > begins[d]) ranks.insert(s.rank);
      split += ranks.size() > 1;
    }
    EXPECT_LE(split, size_t(cp)) << "cp " << cp << ": more documents split than ranks";
  }
  for (int cp : {4, 8}) {  // one document: each rank's area within 10% of the mean
    const int64_t T = int64_t(cp) * 2048;
    const std::vector<RingSpan> spans = gather_pack_spans({0, T}, cp);
    std::vector<double> area(size_t(cp), 0.0);
    for (const RingSpan& s : spans)
      area[size_t(s.rank)] += double(s.len) * double(s.begin) + double(s.len) * double(s.len + 1) / 2;
    const double mean = double(T) * double(T + 1) / 2 / cp;
    for (int r = 0; r < cp; ++r) EXPECT_NEAR(area[size_t(r)] / mean, 1.0, 0.1) << "cp " << cp << " rank " << r;
  }
}

TEST(GatherPack, TheChoiceIsTheLeastPredictedTimeAndGatherOnlyWhenAllowed) {
  std::mt19937_64 rng(9);
  const int cp = 8;
  const int64_t T = 16384;
  const std::vector<int64_t> starts = doc_starts_from_lengths(random_lengths(rng, T, 3000, false), T);
  const RingChoice ring_only = balanced_ring_choice(starts, cp, RingShape{}, false);
  EXPECT_FALSE(ring_only.gather);
  const std::vector<RingCandidate> all = ring_candidates(starts, cp, RingShape{}, false, true);
  bool any_gather = false;
  double least = 1e300;
  for (const RingCandidate& c : all) any_gather |= c.gather, least = std::min(least, c.time.total_us());
  EXPECT_TRUE(any_gather);
  const RingChoice both = balanced_ring_choice(starts, cp, RingShape{}, true);
  EXPECT_DOUBLE_EQ(both.time.total_us(), least) << both.label;
  EXPECT_LE(both.time.total_us(), ring_only.time.total_us());
  EXPECT_EQ(both.gather, both.label.rfind("gather:", 0) == 0) << both.label;
}

}  // namespace
}  // namespace rt
