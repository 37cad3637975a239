// The kernels' tile cost of a ring order of packed documents (parallel/ring_tile_cost.h).
#include "parallel/ring_tile_cost.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "kernels/tensor.h"

namespace rt {

namespace {

struct QueryTile {
  int64_t pos_lo, pos_hi, doc_lo, doc_hi;  // min / max over the tile's rows of position and document start
};

// One rank's key tiles: min and max position of each, and whether both run non-decreasing over the tiles.
struct KeyTiles {
  std::vector<int64_t> lo, hi;  // (ceil(n / 128)) each
  bool monotone = true;
};

std::vector<QueryTile> query_tiles(const std::vector<int64_t>& doc_start, const int64_t* pos, int64_t n) {
  std::vector<QueryTile> out;  // (ceil(n / 64))
  for (int64_t t0 = 0; t0 < n; t0 += kCostQueryTileRows) {
    QueryTile q{INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN};
    for (int64_t i = t0; i < std::min(n, t0 + kCostQueryTileRows); ++i) {
      const int64_t p = pos[i], d = doc_start[size_t(p)];
      q.pos_lo = std::min(q.pos_lo, p), q.pos_hi = std::max(q.pos_hi, p);
      q.doc_lo = std::min(q.doc_lo, d), q.doc_hi = std::max(q.doc_hi, d);
    }
    out.push_back(q);
  }
  return out;
}

KeyTiles key_tiles(const int64_t* pos, int64_t n) {
  KeyTiles k;
  for (int64_t t0 = 0; t0 < n; t0 += kCostKeyTileRows) {
    const int64_t* b = pos + t0;
    const auto mm = std::minmax_element(b, pos + std::min(n, t0 + kCostKeyTileRows));
    if (!k.lo.empty() && (*mm.first < k.lo.back() || *mm.second < k.hi.back())) k.monotone = false;
    k.lo.push_back(*mm.first);
    k.hi.push_back(*mm.second);
  }
  return k;
}

// Cost of one query tile against one rank's key tiles: full tiles 1, the rest of the span of non-skipped tiles
// kPartialTileCost.
double query_tile_cost(const QueryTile& q, const KeyTiles& k, bool* active, RingTileCost* counts) {
  const int64_t nk = int64_t(k.lo.size());
  int64_t span = 0, full = 0;
  if (k.monotone) {
    // Not skipped: kmax >= doc_lo (a suffix) and kmin <= pos_hi (a prefix). Full: kmin >= doc_hi (a suffix) and
    // kmax <= pos_lo (a prefix); full tiles are never skipped.
    const int64_t a = std::lower_bound(k.hi.begin(), k.hi.end(), q.doc_lo) - k.hi.begin();
    const int64_t b = std::upper_bound(k.lo.begin(), k.lo.end(), q.pos_hi) - k.lo.begin();
    const int64_t c = std::lower_bound(k.lo.begin(), k.lo.end(), q.doc_hi) - k.lo.begin();
    const int64_t d = std::upper_bound(k.hi.begin(), k.hi.end(), q.pos_lo) - k.hi.begin();
    span = std::max<int64_t>(0, b - a);
    full = std::max<int64_t>(0, std::min(b, d) - std::max(a, c));
  } else {
    int64_t first = nk, last = -1;
    for (int64_t j = 0; j < nk; ++j) {
      if (k.hi[size_t(j)] < q.doc_lo || k.lo[size_t(j)] > q.pos_hi) continue;  // skipped
      first = std::min(first, j), last = j;
      if (k.lo[size_t(j)] >= q.doc_hi && k.hi[size_t(j)] <= q.pos_lo) ++full;
    }
    span = last >= first ? last - first + 1 : 0;
  }
  *active = span > 0;
  counts->full += double(full);
  counts->partial += double(span - full);
  return double(full) + kPartialTileCost * double(span - full);
}

}  // namespace

RingTileCost ring_tile_cost(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp,
                            const std::vector<double>& pairs) {
  const int64_t T = int64_t(doc_start.size());
  RT_CHECK(cp >= 1 && T % cp == 0 && int64_t(order.size()) == T,
           "ring_tile_cost: order has " << order.size() << " entries for T=" << T << ", cp=" << cp);
  RT_CHECK(pairs.empty() || pairs.size() == size_t(cp) * size_t(cp), "ring_tile_cost: pairs must hold cp*cp counts");
  const int64_t n = T / cp;
  std::vector<std::vector<QueryTile>> q(static_cast<size_t>(cp));  // per rank
  std::vector<KeyTiles> k(static_cast<size_t>(cp));
  for (int r = 0; r < cp; ++r) {
    q[size_t(r)] = query_tiles(doc_start, order.data() + r * n, n);
    k[size_t(r)] = key_tiles(order.data() + r * n, n);
  }
  RingTileCost cost;
  cost.tiles.assign(size_t(cp) * size_t(cp), 0.0);
  cost.active.assign(size_t(cp) * size_t(cp), 0.0);
  cost.full_tiles.assign(size_t(cp) * size_t(cp), 0.0);
  cost.partial_tiles.assign(size_t(cp) * size_t(cp), 0.0);
  cost.runs.assign(size_t(cp) * size_t(cp), 0);
  for (int r = 0; r < cp; ++r)
    for (int s = 0; s < cp; ++s) {
      if (!pairs.empty() && pairs[size_t(r * cp + s)] <= 0) continue;  // RingAttention skips the call
      double c = 0, act = 0;
      const double full0 = cost.full, partial0 = cost.partial;
      for (const QueryTile& qt : q[size_t(r)]) {
        bool a = false;
        c += query_tile_cost(qt, k[size_t(s)], &a, &cost);
        act += a ? 1 : 0;
      }
      cost.full_tiles[size_t(r * cp + s)] = cost.full - full0;
      cost.partial_tiles[size_t(r * cp + s)] = cost.partial - partial0;
      cost.runs[size_t(r * cp + s)] = 1;
      cost.tile_sum += c;
      cost.calls += 1;
      c += kCallQueryTileCost * act + kCallCost;
      cost.active[size_t(r * cp + s)] = act;
      cost.tiles[size_t(r * cp + s)] = c;
      cost.total += c;
    }
  for (int t = 0; t < cp; ++t) {
    double mx = 0;
    for (int r = 0; r < cp; ++r) mx = std::max(mx, cost.tiles[size_t(r * cp + ((r - t) % cp + cp) % cp)]);
    cost.critical += mx;
  }
  return cost;
}

double whole_tile_cost(const std::vector<int64_t>& doc_start) {
  std::vector<int64_t> order(doc_start.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  return ring_tile_cost(doc_start, order, 1).total;
}

}  // namespace rt
