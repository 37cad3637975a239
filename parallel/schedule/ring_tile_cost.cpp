// The kernels' tile cost of a ring order of packed documents (parallel/schedule/ring_tile_cost.h).
#include "parallel/schedule/ring_tile_cost.h"

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

// An empty cost of cp ranks; add_call fills a call, finish_critical the path.
RingTileCost empty_cost(int cp) {
  RingTileCost cost;
  cost.tiles.assign(size_t(cp) * size_t(cp), 0.0);
  cost.active.assign(size_t(cp) * size_t(cp), 0.0);
  cost.full_tiles.assign(size_t(cp) * size_t(cp), 0.0);
  cost.partial_tiles.assign(size_t(cp) * size_t(cp), 0.0);
  cost.runs.assign(size_t(cp) * size_t(cp), 0);
  return cost;
}

void add_call(RingTileCost* cost, size_t i, double full, double partial, double act) {
  const double c = full + kPartialTileCost * partial;
  cost->full += full, cost->partial += partial;
  cost->full_tiles[i] = full, cost->partial_tiles[i] = partial;
  cost->runs[i] = 1;
  cost->tile_sum += c;
  cost->calls += 1;
  cost->active[i] = act;
  cost->tiles[i] = c + kCallQueryTileCost * act + kCallCost;
  cost->total += cost->tiles[i];
}

void finish_critical(RingTileCost* cost, int cp) {
  for (int t = 0; t < cp; ++t) {
    double mx = 0;
    for (int r = 0; r < cp; ++r) mx = std::max(mx, cost->tiles[size_t(r * cp + ((r - t) % cp + cp) % cp)]);
    cost->critical += mx;
  }
}

void check_args(int64_t T, int cp, const std::vector<double>& pairs) {
  RT_CHECK(cp >= 1 && T % cp == 0, "ring_tile_cost: T = " << T << " is not a multiple of cp = " << cp);
  RT_CHECK(pairs.empty() || pairs.size() == size_t(cp) * size_t(cp), "ring_tile_cost: pairs must hold cp*cp counts");
}

// Positions at the given local rows (non-decreasing) of a rank holding `mine` (spans in position order).
std::vector<int64_t> positions_at(const RingSpan* mine, const std::vector<int64_t>& rows) {
  std::vector<int64_t> out(rows.size());  // (rows)
  size_t k = 0;
  int64_t first_row = 0;  // local row of mine[k].begin
  for (size_t i = 0; i < rows.size(); ++i) {
    while (rows[i] >= first_row + mine[k].len) first_row += mine[k++].len;
    out[i] = mine[k].begin + rows[i] - first_row;
  }
  return out;
}

// The first and last local row of each tile of `rows` rows over n.
std::vector<int64_t> tile_ends(int64_t n, int64_t rows) {
  std::vector<int64_t> out;  // (2 ceil(n / rows))
  for (int64_t t0 = 0; t0 < n; t0 += rows) out.push_back(t0), out.push_back(std::min(n, t0 + rows) - 1);
  return out;
}

}  // namespace

RingTileCost ring_tile_cost(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp,
                            const std::vector<double>& pairs) {
  const int64_t T = int64_t(doc_start.size());
  check_args(T, cp, pairs);
  RT_CHECK(int64_t(order.size()) == T, "ring_tile_cost: order has " << order.size() << " entries for T=" << T);
  const int64_t n = T / cp;
  std::vector<std::vector<QueryTile>> q(static_cast<size_t>(cp));  // per rank
  std::vector<KeyTiles> k(static_cast<size_t>(cp));
  for (int r = 0; r < cp; ++r) {
    q[size_t(r)] = query_tiles(doc_start, order.data() + r * n, n);
    k[size_t(r)] = key_tiles(order.data() + r * n, n);
  }
  RingTileCost cost = empty_cost(cp);
  for (int r = 0; r < cp; ++r)
    for (int s = 0; s < cp; ++s) {
      if (!pairs.empty() && pairs[size_t(r * cp + s)] <= 0) continue;  // RingAttention skips the call
      RingTileCost counts;  // full / partial of this call
      double act = 0;
      for (const QueryTile& qt : q[size_t(r)]) {
        bool a = false;
        query_tile_cost(qt, k[size_t(s)], &a, &counts);
        act += a ? 1 : 0;
      }
      add_call(&cost, size_t(r * cp + s), counts.full, counts.partial, act);
    }
  finish_critical(&cost, cp);
  return cost;
}

RingTileRows ring_tile_rows(const std::vector<RingSpan>& spans, int64_t T, int cp) {
  RT_CHECK(cp >= 1 && T % cp == 0, "ring_tile_rows: T = " << T << " is not a multiple of cp = " << cp);
  const int64_t n = T / cp;
  std::vector<size_t> first(size_t(cp) + 1, 0);  // (cp + 1) rank r's spans at mine[first[r], first[r + 1])
  for (const RingSpan& s : spans) {
    RT_CHECK(s.rank >= 0 && s.rank < cp, "ring_tile_rows: a span names rank " << s.rank << " of " << cp);
    ++first[size_t(s.rank) + 1];
  }
  for (int r = 0; r < cp; ++r) first[size_t(r) + 1] += first[size_t(r)];
  std::vector<RingSpan> mine(spans.size());  // (spans) grouped by rank, each rank's in position order
  {
    std::vector<size_t> next(first.begin(), first.end() - 1);
    for (const RingSpan& s : spans) {
      RT_CHECK(next[size_t(s.rank)] == first[size_t(s.rank)] || mine[next[size_t(s.rank)] - 1].begin < s.begin,
               "ring_tile_rows: spans must be in position order (span at " << s.begin << ")");
      mine[next[size_t(s.rank)]++] = s;
    }
  }
  RingTileRows rows;
  rows.query.resize(size_t(cp)), rows.key.resize(size_t(cp));
  for (int r = 0; r < cp; ++r) {
    int64_t held = 0;
    for (size_t x = first[size_t(r)]; x < first[size_t(r) + 1]; ++x) held += mine[x].len;
    RT_CHECK(held == n, "ring_tile_rows: rank " << r << " holds " << held << " positions, not " << n);
    rows.query[size_t(r)] = positions_at(mine.data() + first[size_t(r)], tile_ends(n, kCostQueryTileRows));
    rows.key[size_t(r)] = positions_at(mine.data() + first[size_t(r)], tile_ends(n, kCostKeyTileRows));
  }
  return rows;
}

RingTileRows ring_tile_rows(Layout layout, int64_t T, int cp) {
  RT_CHECK(layout != Layout::balanced, "ring_tile_rows: balanced has no fixed rows");
  const int64_t n = T / cp, h = n / 2;
  RingTileRows rows;
  rows.query.resize(size_t(cp)), rows.key.resize(size_t(cp));
  for (int r = 0; r < cp; ++r) {
    auto at = [&](int64_t i) {  // layout_positions(layout, T, cp, r)[i] (parallel/schedule/layout.h)
      if (layout == Layout::contiguous) return r * n + i;
      if (layout == Layout::striped) return r + i * int64_t(cp);
      return i < h ? r * h + i : (2 * int64_t(cp) - 1 - r) * h + i - h;  // zigzag
    };
    for (int64_t i : tile_ends(n, kCostQueryTileRows)) rows.query[size_t(r)].push_back(at(i));
    for (int64_t i : tile_ends(n, kCostKeyTileRows)) rows.key[size_t(r)].push_back(at(i));
  }
  return rows;
}

RingTileCost ring_tile_cost_for_spans(const std::vector<int64_t>& doc_start, const std::vector<RingSpan>& spans,
                                      int cp, const std::vector<double>& pairs) {
  return ring_tile_cost_for_rows(doc_start, ring_tile_rows(spans, int64_t(doc_start.size()), cp), cp, pairs);
}

RingTileCost ring_tile_cost_for_rows(const std::vector<int64_t>& doc_start, const RingTileRows& rows, int cp,
                                     const std::vector<double>& pairs) {
  const int64_t T = int64_t(doc_start.size());
  check_args(T, cp, pairs);
  RT_CHECK(rows.query.size() == size_t(cp) && rows.key.size() == size_t(cp), "ring_tile_cost: rows of "
                                                                                 << rows.query.size() << " ranks for cp = " << cp);
  std::vector<std::vector<QueryTile>> q(static_cast<size_t>(cp));  // per rank; positions increase, so a tile's
  std::vector<KeyTiles> k(static_cast<size_t>(cp));                // extremes are its first and last rows
  for (int r = 0; r < cp; ++r) {
    const std::vector<int64_t>&qp = rows.query[size_t(r)], &kp = rows.key[size_t(r)];
    for (size_t i = 0; i < qp.size(); i += 2)
      q[size_t(r)].push_back({qp[i], qp[i + 1], doc_start[size_t(qp[i])], doc_start[size_t(qp[i + 1])]});
    for (size_t i = 0; i < kp.size(); i += 2) k[size_t(r)].lo.push_back(kp[i]), k[size_t(r)].hi.push_back(kp[i + 1]);
  }
  RingTileCost cost = empty_cost(cp);
  for (int r = 0; r < cp; ++r)
    for (int s = 0; s < cp; ++s) {
      if (!pairs.empty() && pairs[size_t(r * cp + s)] <= 0) continue;  // RingAttention skips the call
      // query_tile_cost's four bounds, each non-decreasing over the query tiles: one sweep per call.
      const std::vector<int64_t>&lo = k[size_t(s)].lo, &hi = k[size_t(s)].hi;
      const size_t nk = lo.size();
      size_t a = 0, b = 0, c = 0, d = 0;
      int64_t full = 0, partial = 0, act = 0;
      for (const QueryTile& qt : q[size_t(r)]) {
        while (a < nk && hi[a] < qt.doc_lo) ++a;
        while (b < nk && lo[b] <= qt.pos_hi) ++b;
        while (c < nk && lo[c] < qt.doc_hi) ++c;
        while (d < nk && hi[d] <= qt.pos_lo) ++d;
        const int64_t span = std::max<int64_t>(0, int64_t(b) - int64_t(a));
        const int64_t f = std::max<int64_t>(0, int64_t(std::min(b, d)) - int64_t(std::max(a, c)));
        full += f, partial += span - f, act += span > 0;
      }
      add_call(&cost, size_t(r * cp + s), double(full), double(partial), double(act));
    }
  finish_critical(&cost, cp);
  return cost;
}

double whole_tile_cost(const std::vector<int64_t>& doc_start) {
  std::vector<int64_t> order(doc_start.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  return ring_tile_cost(doc_start, order, 1).total;
}

}  // namespace rt
