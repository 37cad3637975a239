// parallel/schedule/doc_pack.h and parallel/schedule/ring_tile_cost.h: the docpack ring order is a permutation with
// T/cp increasing
// positions per rank, keeps short documents whole on one rank, splits long ones evenly over every rank, and
// balances the ranks' step-0 pairs; the tile cost equals a brute-force classification of every (query tile, key
// tile) pair from its elements, on rank-increasing and shuffled orders, and a case worked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/doc_pack.h"
#include "parallel/schedule/ring_tile_cost.h"

namespace rt {
namespace {

struct DocSpan {
  int64_t begin, len;
};

std::vector<DocSpan> docs_of(const std::vector<int64_t>& starts) {
  std::vector<DocSpan> d;
  for (int64_t p = 0; p < int64_t(starts.size()); ++p) {
    if (starts[size_t(p)] == p) d.push_back({p, 0});
    ++d.back().len;
  }
  return d;
}

TEST(DocPack, PermutationWithShortDocumentsWholeAndLongOnesSpread) {
  std::mt19937_64 rng(5);
  for (int cp : {2, 3, 4, 8}) {
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t T = int64_t(cp) * (512 + 37 * trial);  // not always a multiple of 2cp
      std::vector<int64_t> lengths;
      for (int d = 0; d < 64; ++d) lengths.push_back(1 + int64_t(rng() % 60));  // short documents
      // One long document, inside the window (a document the window cuts short is a short one).
      lengths.insert(lengths.begin() + 10, int64_t(T) / 3 + int64_t(trial));
      const std::vector<int64_t> starts = doc_starts_from_lengths(lengths, T, 0, 0);
      const int64_t n = T / cp, split_min = 200;
      const std::vector<int64_t> order = docpack_ring_order(starts, cp, split_min);
      ASSERT_EQ(int64_t(order.size()), T);
      std::vector<int64_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t p = 0; p < T; ++p) ASSERT_EQ(sorted[size_t(p)], p) << "not a permutation, cp=" << cp;
      std::vector<int> owner(static_cast<size_t>(T));
      for (int r = 0; r < cp; ++r)
        for (int64_t i = 0; i < n; ++i) {
          owner[size_t(order[size_t(r * n + i)])] = r;
          if (i > 0) {
            ASSERT_LT(order[size_t(r * n + i - 1)], order[size_t(r * n + i)]) << "rank " << r;
          }
        }
      int cut_short = 0;
      for (const DocSpan& d : docs_of(starts)) {
        std::map<int, int64_t> held;  // rank -> tokens of the document
        for (int64_t p = d.begin; p < d.begin + d.len; ++p) held[owner[size_t(p)]] += 1;
        if (d.len >= split_min) {  // long: on every rank, L/cp each within the remainder
          ASSERT_EQ(int(held.size()), cp) << "long document of " << d.len << " tokens, cp=" << cp;
          for (const auto& h : held) EXPECT_LE(std::abs(h.second * cp - d.len), 2 * cp) << "rank " << h.first;
        } else {
          cut_short += held.size() > 1 ? 1 : 0;
        }
      }
      // The room left after the long document's pieces is filled by whole short documents but for a few cut ones.
      EXPECT_LE(cut_short, cp) << "cp=" << cp << " T=" << T;
      // The ranks' pairs are balanced: LPT on step 0 and the long document even over every step. (Not a
      // guarantee: one short document holding most of the short pairs cannot be balanced with equal token counts;
      // balanced then takes another candidate.)
      EXPECT_LE(ring_imbalance(ring_pair_counts(starts, order, cp), cp), 1.10) << "cp=" << cp << " T=" << T;
    }
  }
}

TEST(DocPack, OneDocumentIsZigzag) {
  const int64_t T = 1024;
  for (int cp : {2, 4, 8}) {
    const std::vector<int64_t> one(size_t(T), 0);
    EXPECT_EQ(docpack_ring_order(one, cp, 1), layout_ring_order(Layout::zigzag, T, cp)) << "cp=" << cp;
  }
}

TEST(DocPack, SplitThresholdsStayAboveOneTilePerPiece) {
  for (int cp : {2, 8})
    for (int64_t T : {int64_t(4096), int64_t(131072)}) {
      const std::vector<int64_t> t = docpack_split_thresholds(T, cp);
      ASSERT_FALSE(t.empty());
      EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
      for (int64_t v : t) EXPECT_GE(v, 2 * cp * 64) << "T=" << T << " cp=" << cp;
    }
  // n = 16384: 2cp*128 = n/8 = 2048 once.
  EXPECT_EQ(docpack_split_thresholds(131072, 8), (std::vector<int64_t>{2048, 4096, 8192, 16384}));
}

// Tile cost from the elements of each tile, with no shortcut: the reference for ring_tile_cost.
double brute_tile_cost(const std::vector<int64_t>& starts, const std::vector<int64_t>& order, int cp, int r, int s) {
  const int64_t n = int64_t(order.size()) / cp;
  double cost = 0;
  for (int64_t q0 = 0; q0 < n; q0 += kCostQueryTileRows) {
    int64_t plo = INT64_MAX, phi = INT64_MIN, dlo = INT64_MAX, dhi = INT64_MIN;
    for (int64_t i = q0; i < std::min(n, q0 + kCostQueryTileRows); ++i) {
      const int64_t p = order[size_t(r * n + i)];
      plo = std::min(plo, p), phi = std::max(phi, p);
      dlo = std::min(dlo, starts[size_t(p)]), dhi = std::max(dhi, starts[size_t(p)]);
    }
    int first = -1, last = -1, full = 0, tile = 0;
    for (int64_t k0 = 0; k0 < n; k0 += kCostKeyTileRows, ++tile) {
      int64_t klo = INT64_MAX, khi = INT64_MIN;
      for (int64_t j = k0; j < std::min(n, k0 + kCostKeyTileRows); ++j)
        klo = std::min(klo, order[size_t(s * n + j)]), khi = std::max(khi, order[size_t(s * n + j)]);
      if (khi < dlo || klo > phi) continue;
      if (first < 0) first = tile;
      last = tile;
      if (klo >= dhi && khi <= plo) ++full;
    }
    if (first >= 0) cost += kCallQueryTileCost + full + kPartialTileCost * ((last - first + 1) - full);
  }
  return cost;
}

TEST(RingTileCost, MatchesBruteForce) {
  const int64_t T = 1536;
  std::mt19937_64 rng(11);
  for (int cp : {1, 2, 3, 4}) {
    std::vector<int64_t> lengths;
    for (int d = 0; d < 40; ++d) lengths.push_back(1 + int64_t(rng() % 150));
    const std::vector<int64_t> starts = doc_starts_from_lengths(lengths, T, 3, 5);
    std::vector<int64_t> shuffled(static_cast<size_t>(T));
    std::iota(shuffled.begin(), shuffled.end(), 0);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    std::vector<int64_t> sorted_per_rank = shuffled;
    for (int r = 0; r < cp; ++r)
      std::sort(sorted_per_rank.begin() + r * (T / cp), sorted_per_rank.begin() + (r + 1) * (T / cp));
    // Rank-increasing orders take the binary search; the shuffled one the scan (and its spans).
    for (const auto& order : {sorted_per_rank, shuffled, docpack_ring_order(starts, cp, 300),
                              layout_ring_order(Layout::striped, T, cp)}) {
      const std::vector<double> pairs = ring_pair_counts(starts, order, cp);
      const RingTileCost c = ring_tile_cost(starts, order, cp, pairs);
      double total = 0;
      for (int r = 0; r < cp; ++r)
        for (int s = 0; s < cp; ++s) {
          const double want =
              pairs[size_t(r * cp + s)] > 0 ? brute_tile_cost(starts, order, cp, r, s) + kCallCost : 0.0;
          EXPECT_DOUBLE_EQ(c.tiles[size_t(r * cp + s)], want) << "cp=" << cp << " r=" << r << " s=" << s;
          total += want;
        }
      EXPECT_DOUBLE_EQ(c.total, total);
      double critical = 0;
      for (int t = 0; t < cp; ++t) {
        double mx = 0;
        for (int r = 0; r < cp; ++r) mx = std::max(mx, c.tiles[size_t(r * cp + (r - t + cp) % cp)]);
        critical += mx;
      }
      EXPECT_DOUBLE_EQ(c.critical, critical);
    }
  }
}

TEST(RingTileCost, WorkedCases) {
  // One document of 256 tokens, one call: query tiles of rows 0-63 ... 192-255, key tiles 0-127 and 128-255.
  // Key tile 0: partial for query tiles 0 and 1, full for 2 and 3; key tile 1: skipped for query tiles 0 and 1,
  // partial for 2 and 3. 2 full + 4 partial, and 4 query tiles that visit keys.
  EXPECT_DOUBLE_EQ(whole_tile_cost(std::vector<int64_t>(256, 0)),
                   2 + 4 * kPartialTileCost + 4 * kCallQueryTileCost + kCallCost);
  // Two documents of 128: the second's query tiles skip the first's keys, so each document is its own 2x1 block of
  // partial tiles.
  const std::vector<int64_t> two = doc_starts_from_lengths({128}, 256);
  EXPECT_DOUBLE_EQ(whole_tile_cost(two), 4 * kPartialTileCost + 4 * kCallQueryTileCost + kCallCost);
  // A call with no visible pair costs nothing even where the tile summaries overlap.
  const RingTileCost c = ring_tile_cost(two, layout_ring_order(Layout::contiguous, 256, 2), 2,
                                        ring_pair_counts(two, layout_ring_order(Layout::contiguous, 256, 2), 2));
  EXPECT_DOUBLE_EQ(c.tiles[1], 0.0);
  EXPECT_DOUBLE_EQ(c.tiles[2], 0.0);
  EXPECT_DOUBLE_EQ(c.total, 2 * (2 * (kPartialTileCost + kCallQueryTileCost) + kCallCost));
  EXPECT_DOUBLE_EQ(c.calls, 2);
}

}  // namespace
}  // namespace rt
