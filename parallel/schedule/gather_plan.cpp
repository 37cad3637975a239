// The gather scheme's plan, tiles and predicted time (parallel/schedule/gather_plan.h).
#include "parallel/schedule/gather_plan.h"

#include <algorithm>
#include <numeric>

#include "kernels/tensor.h"

namespace rt {

int64_t KvGatherPlan::max_recv_rows() const {
  return recv_rows.empty() ? 0 : *std::max_element(recv_rows.begin(), recv_rows.end());
}

int64_t KvGatherPlan::total_rows() const {
  int64_t t = 0;
  for (int64_t r : recv_rows) t += r;
  return t;
}

double KvGatherPlan::bytes_per_layer(double kv_row_bytes, double dkv_row_bytes) const {
  return double(total_rows()) * (2 * kv_row_bytes + dkv_row_bytes);
}

KvGatherPlan kv_gather_plan_for_spans(const std::vector<int64_t>& begins, const std::vector<RingSpan>& spans, int cp) {
  RT_CHECK(cp >= 1 && begins.size() >= 2, "kv_gather_plan: needs cp >= 1 and the sample's document begins");
  const int64_t T = begins.back();
  RT_CHECK(T % cp == 0, "kv_gather_plan: T = " << T << " is not a multiple of cp = " << cp);
  KvGatherPlan plan;
  plan.cp = cp;
  plan.n = T / cp;
  plan.pieces.assign(size_t(cp), {});
  plan.recv_rows.assign(size_t(cp), 0);
  plan.send_rows.assign(size_t(cp), 0);
  plan.rows.assign(size_t(cp) * size_t(cp), 0);
  // Each span's first local row on its rank (spans in position order, each rank's positions increasing).
  std::vector<int64_t> span_row(spans.size());  // (spans)
  {
    std::vector<int64_t> held(size_t(cp), 0);  // (cp) rows so far
    int64_t p = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      const RingSpan& s = spans[i];
      RT_CHECK(s.begin == p && s.len > 0 && s.rank >= 0 && s.rank < cp,
               "kv_gather_plan: span at " << s.begin << " (length " << s.len << ", rank " << s.rank
                                          << ") does not continue position " << p);
      span_row[i] = held[size_t(s.rank)];
      held[size_t(s.rank)] += s.len;
      p += s.len;
    }
    RT_CHECK(p == T, "kv_gather_plan: the spans cover " << p << " of " << T << " positions");
    for (int r = 0; r < cp; ++r)
      RT_CHECK(held[size_t(r)] == plan.n, "kv_gather_plan: rank " << r << " holds " << held[size_t(r)]
                                                                  << " positions, not " << plan.n);
  }
  // Per rank, the key positions its queries see, as intervals in position order: for each piece of one of its
  // spans within one document, [document begin, the piece's last position].
  std::vector<std::vector<std::pair<int64_t, int64_t>>> need(static_cast<size_t>(cp));  // [r] half-open intervals
  size_t doc = 0;
  for (const RingSpan& s : spans) {
    for (int64_t p = s.begin, end = s.begin + s.len; p < end;) {
      while (begins[doc + 1] <= p) ++doc;
      const int64_t piece_end = std::min(end, begins[doc + 1]);
      auto& iv = need[size_t(s.rank)];
      if (!iv.empty() && iv.back().second >= begins[doc]) iv.back().second = std::max(iv.back().second, piece_end);
      else iv.push_back({begins[doc], piece_end});
      p = piece_end;
    }
  }
  // Intersect each rank's intervals with the other ranks' spans: the pieces, in position order.
  for (int r = 0; r < cp; ++r) {
    std::vector<KvGatherPiece>& out = plan.pieces[size_t(r)];
    size_t k = 0;  // first span that may overlap the current interval
    for (const auto& [lo, hi] : need[size_t(r)]) {
      k = size_t(std::upper_bound(spans.begin(), spans.end(), lo,
                                  [](int64_t v, const RingSpan& s) { return v < s.begin; }) -
                 spans.begin());
      if (k > 0) --k;
      for (; k < spans.size() && spans[k].begin < hi; ++k) {
        const RingSpan& s = spans[k];
        if (s.rank == r) continue;
        const int64_t a = std::max(lo, s.begin), b = std::min(hi, s.begin + s.len);
        if (a >= b) continue;
        KvGatherPiece piece;
        piece.source = s.rank;
        piece.src_row = span_row[k] + (a - s.begin);
        piece.pos = a;
        piece.len = b - a;
        piece.dst_row = plan.recv_rows[size_t(r)];
        plan.recv_rows[size_t(r)] += piece.len;
        plan.send_rows[size_t(s.rank)] += piece.len;
        plan.rows[size_t(r * cp + s.rank)] += piece.len;
        out.push_back(piece);
      }
    }
  }
  return plan;
}

KvGatherPlan kv_gather_plan_for_order(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp) {
  return kv_gather_plan_for_spans(document_begins(doc_start), ring_spans_from_order(order, cp), cp);
}

std::vector<int64_t> kv_gather_positions(const KvGatherPlan& plan, int r) {
  RT_CHECK(r >= 0 && r < plan.cp, "kv_gather_positions: rank " << r << " of " << plan.cp);
  std::vector<int64_t> pos;  // (recv_rows[r])
  pos.reserve(size_t(plan.recv_rows[size_t(r)]));
  for (const KvGatherPiece& p : plan.pieces[size_t(r)])
    for (int64_t i = 0; i < p.len; ++i) pos.push_back(p.pos + i);
  return pos;
}

namespace {

// The first and last position of each 128-row key tile of rank r's gathered buffer (its pieces, positions increasing).
std::vector<int64_t> gathered_key_tiles(const KvGatherPlan& plan, int r) {
  std::vector<int64_t> out;  // (2 * tiles)
  const int64_t rows = plan.recv_rows[size_t(r)];
  const std::vector<KvGatherPiece>& pieces = plan.pieces[size_t(r)];
  size_t k = 0;
  auto position_of = [&](int64_t row) {  // rows asked in increasing order
    while (pieces[k].dst_row + pieces[k].len <= row) ++k;
    return pieces[k].pos + (row - pieces[k].dst_row);
  };
  for (int64_t t0 = 0; t0 < rows; t0 += kCostKeyTileRows) {
    out.push_back(position_of(t0));
    out.push_back(position_of(std::min(rows, t0 + kCostKeyTileRows) - 1));
  }
  return out;
}

}  // namespace

QueryRowRange gathered_query_rows(const int64_t* q_pos, const int64_t* q_doc_start, int64_t n,
                                  const std::vector<int64_t>& gathered_pos) {
  RT_CHECK(std::is_sorted(gathered_pos.begin(), gathered_pos.end()),
           "gathered_query_rows: the gathered positions must increase (the plan's buffer order)");
  QueryRowRange range;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    auto first = std::lower_bound(gathered_pos.begin(), gathered_pos.end(), q_doc_start[i]);
    if (first == gathered_pos.end() || *first > q_pos[i]) continue;  // no gathered key in [start, pos]
    if (!any) range.lo = i;
    range.hi = i + 1;
    any = true;
  }
  return range;
}

QueryRowRange row_range_union(const QueryRowRange& a, const QueryRowRange& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}

KvGatherTiles kv_gather_tiles(const std::vector<int64_t>& doc_start, const std::vector<RingSpan>& spans,
                              const KvGatherPlan& plan, int cp) {
  const int64_t T = int64_t(doc_start.size());
  RT_CHECK(plan.cp == cp && plan.n * cp == T, "kv_gather_tiles: a plan of cp = " << plan.cp << ", n = " << plan.n
                                                                                  << " for T = " << T << ", cp = " << cp);
  const RingTileRows own = ring_tile_rows(spans, T, cp);
  RingTileRows gathered = own;
  std::vector<double> diagonal(size_t(cp) * size_t(cp), 0.0), received(size_t(cp) * size_t(cp), 0.0);
  for (int r = 0; r < cp; ++r) {
    gathered.key[size_t(r)] = gathered_key_tiles(plan, r);
    diagonal[size_t(r * cp + r)] = 1;
    received[size_t(r * cp + r)] = plan.recv_rows[size_t(r)] > 0 ? 1 : 0;
  }
  KvGatherTiles tiles;
  tiles.own = ring_tile_cost_for_rows(doc_start, own, cp, diagonal);
  tiles.gathered = ring_tile_cost_for_rows(doc_start, gathered, cp, received);
  // The own call's pairs per key tile: each rank's rows in position order are runs of one document each (a group,
  // rows [g0, g1)), and row i of a group is seen by its rows i..g1-1; a group adds sum over i of (g1 - i) to each tile
  // it covers. The spans come in position order; a piece is a span's run within one document.
  const int64_t tile_rows = kOwnSplitKeyRows, n = plan.n;
  tiles.own_key_tile_pairs.assign(size_t(cp), std::vector<int64_t>(size_t((n + tile_rows - 1) / tile_rows), 0));
  std::vector<int64_t> row(size_t(cp), 0), group_start(size_t(cp), 0), group_doc(size_t(cp), -1);  // (cp)
  auto close_group = [&](int r) {  // rows [group_start, row) of rank r, one document
    const int64_t g0 = group_start[size_t(r)], g1 = row[size_t(r)];
    std::vector<int64_t>& out = tiles.own_key_tile_pairs[size_t(r)];
    for (int64_t t = g0 / tile_rows; t * tile_rows < g1; ++t) {
      const int64_t x = std::max(g0, t * tile_rows), y = std::min(g1, (t + 1) * tile_rows);
      out[size_t(t)] += (y - x) * g1 - (x + y - 1) * (y - x) / 2;  // sum over i in [x, y) of (g1 - i)
    }
  };
  for (const RingSpan& s : spans)
    for (int64_t p = s.begin, end = s.begin + s.len; p < end;) {
      const int64_t doc = doc_start[size_t(p)];  // positions of one document are consecutive, its start constant
      const int64_t piece_end =
          std::upper_bound(doc_start.begin() + p, doc_start.begin() + end, doc) - doc_start.begin();
      if (group_doc[size_t(s.rank)] != doc) {
        if (group_doc[size_t(s.rank)] >= 0) close_group(s.rank);
        group_doc[size_t(s.rank)] = doc, group_start[size_t(s.rank)] = row[size_t(s.rank)];
      }
      row[size_t(s.rank)] += piece_end - p;
      p = piece_end;
    }
  for (int r = 0; r < cp; ++r)
    if (group_doc[size_t(r)] >= 0) close_group(r);
  return tiles;
}

void add_own_key_pairs(const int64_t* pos, const int64_t* doc_start, int64_t n, std::vector<int64_t>& pairs) {
  RT_CHECK(int64_t(pairs.size()) == n, "add_own_key_pairs: " << pairs.size() << " counts for " << n << " rows");
  bool increasing = true;
  for (int64_t i = 1; i < n && increasing; ++i) increasing = pos[i] > pos[i - 1];
  if (increasing) {  // a document's rows are consecutive: row i is seen by rows i..last of its document
    for (int64_t i = n - 1, last = n - 1; i >= 0; --i) {
      if (i + 1 < n && doc_start[i] != doc_start[i + 1]) last = i;
      pairs[size_t(i)] += last - i + 1;
    }
    return;
  }
  std::vector<int64_t> rows(static_cast<size_t>(n));  // (n) local rows by (document, position)
  std::iota(rows.begin(), rows.end(), int64_t(0));
  std::sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) {
    return doc_start[a] != doc_start[b] ? doc_start[a] < doc_start[b] : pos[a] < pos[b];
  });
  for (int64_t k = n - 1, end = n; k >= 0; --k) {  // end: one past the last row of k's document in `rows`
    if (k + 1 < n && doc_start[rows[size_t(k)]] != doc_start[rows[size_t(k + 1)]]) end = k + 1;
    pairs[size_t(rows[size_t(k)])] += end - k;
  }
}

std::vector<int64_t> key_tile_sums(const std::vector<int64_t>& key_pairs) {
  std::vector<int64_t> out((key_pairs.size() + size_t(kOwnSplitKeyRows) - 1) / size_t(kOwnSplitKeyRows), 0);
  for (size_t i = 0; i < key_pairs.size(); ++i) out[i / size_t(kOwnSplitKeyRows)] += key_pairs[i];
  return out;
}

OwnBwdSplit choose_own_bwd_split(const std::vector<int64_t>& tile_pairs, int64_t n, double own_us, double call_us,
                                 double c_kv_us, double c_dkv_us) {
  const int64_t tiles = (n + kOwnSplitKeyRows - 1) / kOwnSplitKeyRows;
  RT_CHECK(n >= 0 && int64_t(tile_pairs.size()) == tiles,
           "choose_own_bwd_split: " << tile_pairs.size() << " key tiles for " << n << " rows (want " << tiles << ")");
  OwnBwdSplit one;  // no split: part A is the whole call
  one.a_us = own_us;
  int64_t total = 0;
  for (int64_t p : tile_pairs) total += p;
  if (c_dkv_us <= 0 || total <= 0 || n < 2 * kOwnSplitKeyRows || own_us <= call_us) return one;
  const double work = own_us - call_us;  // the part proportional to the pairs
  auto part_us = [&](int64_t pairs) { return call_us + work * double(pairs) / double(total); };
  // Candidates m = t * kOwnSplitKeyRows in [kOwnSplitKeyRows, n - kOwnSplitKeyRows], from the largest down: the
  // first whose part B covers the return, else the smallest.
  int64_t m = 0, b_pairs = 0, suffix = 0;  // suffix: pairs of key tiles [t, tiles)
  for (int64_t t = tiles - 1; t >= 1; --t) {
    suffix += tile_pairs[size_t(t)];
    if (n - t * kOwnSplitKeyRows < kOwnSplitKeyRows) continue;  // part B under one tile (n's partial last tile)
    m = t * kOwnSplitKeyRows, b_pairs = suffix;
    if (part_us(b_pairs) >= c_dkv_us) break;
  }
  OwnBwdSplit split;
  split.m = m;
  split.a_us = part_us(total - b_pairs);
  split.b_us = part_us(b_pairs);
  const double with = std::max(split.a_us, c_kv_us) + std::max(split.b_us, c_dkv_us);
  const double without = std::max(own_us, c_kv_us) + c_dkv_us;
  return with < without ? split : one;
}

OwnBwdSplit own_bwd_split_for_batch(const KvGatherTiles* tiles, const KvGatherPlan* plans, size_t samples, int r,
                                    const std::vector<int64_t>& tile_pairs, const RingShape& shape,
                                    const LinkModel& link) {
  RT_CHECK(samples > 0 && r >= 0 && r < plans[0].cp, "own_bwd_split_for_batch: rank " << r << " of a batch of "
                                                                                       << samples << " samples");
  const int cp = plans[0].cp;
  const KernelTimeModel bwd = gather_kernel_time_model(true, shape.head_dim);
  const size_t i = size_t(r * cp + r);
  double tile_us = 0;  // the own call's tile terms over the samples (one call runs them all)
  bool runs = false, receives = false, returns = false;
  for (size_t b = 0; b < samples; ++b) {
    const RingTileCost& own = tiles[b].own;
    RT_CHECK(plans[b].cp == cp && own.runs.size() == size_t(cp) * size_t(cp),
             "own_bwd_split_for_batch: sample " << b << " is not a plan and tiles of " << cp << " ranks");
    if (own.runs[i]) {
      runs = true;
      tile_us += call_time_us(bwd, own.full_tiles[i], own.partial_tiles[i], own.active[i], shape.heads) - bwd.call_us;
    }
    receives |= plans[b].recv_rows[size_t(r)] > 0;
    returns |= plans[b].recv_rows[size_t(r)] > 0 || plans[b].send_rows[size_t(r)] > 0;
  }
  if (!runs) return {};  // no own call: nothing to split, nothing to time
  const double c_kv = receives ? gather_exchange_us(plans, samples, shape, false, link) : 0.0;
  const double c_dkv = returns ? gather_exchange_us(plans, samples, shape, true, link) : 0.0;
  return choose_own_bwd_split(tile_pairs, plans[0].n, bwd.call_us + tile_us, bwd.call_us, c_kv, c_dkv);
}

bool gather_fwd_one_launch_for_batch(const KvGatherTiles* tiles, const KvGatherPlan* plans, size_t samples, int r,
                                     const RingShape& shape, const LinkModel& link) {
  RT_CHECK(samples > 0 && r >= 0 && r < plans[0].cp, "gather_fwd_one_launch_for_batch: rank " << r << " of a batch of "
                                                                                             << samples << " samples");
  const int cp = plans[0].cp;
  const KernelTimeModel fwd = gather_kernel_time_model(false, shape.head_dim);
  const size_t i = size_t(r * cp + r);
  double own_us = 0, gathered_us = 0;  // tile terms over the samples
  bool receives = false;
  for (size_t b = 0; b < samples; ++b) {
    const RingTileCost &own = tiles[b].own, &got = tiles[b].gathered;
    RT_CHECK(plans[b].cp == cp && own.runs.size() == size_t(cp) * size_t(cp) && got.runs.size() == own.runs.size(),
             "gather_fwd_one_launch_for_batch: sample " << b << " is not a plan and tiles of " << cp << " ranks");
    if (own.runs[i])
      own_us += call_time_us(fwd, own.full_tiles[i], own.partial_tiles[i], own.active[i], shape.heads) - fwd.call_us;
    if (got.runs[i])
      gathered_us += call_time_us(fwd, got.full_tiles[i], got.partial_tiles[i], got.active[i], shape.heads) -
                     fwd.call_us;
    receives |= plans[b].recv_rows[size_t(r)] > 0;
  }
  if (!receives || own_us <= 0 || gathered_us <= 0) return false;  // a call that does not run: nothing to fuse
  return gather_fwd_one_launch(own_us + fwd.call_us, gathered_us + fwd.call_us, fwd.call_us,
                               gather_exchange_us(plans, samples, shape, false, link));
}

bool gather_bwd_one_launch_for_batch(const KvGatherTiles* tiles, const KvGatherPlan* plans, size_t samples, int r,
                                     const OwnBwdSplit& split, const RingShape& shape, const LinkModel& link) {
  RT_CHECK(samples > 0 && r >= 0 && r < plans[0].cp, "gather_bwd_one_launch_for_batch: rank " << r << " of a batch of "
                                                                                             << samples << " samples");
  const int cp = plans[0].cp;
  const KernelTimeModel bwd = gather_kernel_time_model(true, shape.head_dim);
  const size_t i = size_t(r * cp + r);
  double gathered_us = 0;  // tile terms over the samples
  bool receives = false;
  for (size_t b = 0; b < samples; ++b) {
    const RingTileCost& got = tiles[b].gathered;
    RT_CHECK(plans[b].cp == cp && got.runs.size() == size_t(cp) * size_t(cp),
             "gather_bwd_one_launch_for_batch: sample " << b << " is not a plan and tiles of " << cp << " ranks");
    if (got.runs[i])
      gathered_us += call_time_us(bwd, got.full_tiles[i], got.partial_tiles[i], got.active[i], shape.heads) -
                     bwd.call_us;
    receives |= plans[b].recv_rows[size_t(r)] > 0;
  }
  if (!receives || gathered_us <= 0) return false;  // no gathered call: nothing to fuse
  return gather_bwd_one_launch(split, gathered_us + bwd.call_us, bwd.call_us,
                               gather_exchange_us(plans, samples, shape, false, link),
                               gather_exchange_us(plans, samples, shape, true, link));
}

OwnBwdSplit predict_own_bwd_split(const KvGatherTiles& tiles, const KvGatherPlan& plan, int r, const RingShape& shape,
                                  const LinkModel& link) {
  RT_CHECK(r >= 0 && size_t(r) < tiles.own_key_tile_pairs.size(),
           "predict_own_bwd_split: rank " << r << " of " << tiles.own_key_tile_pairs.size());
  return own_bwd_split_for_batch(&tiles, &plan, 1, r, tiles.own_key_tile_pairs[size_t(r)], shape, link);
}

double gather_exchange_us(const KvGatherPlan* plans, size_t samples, const RingShape& shape, bool gradients,
                          const LinkModel& link) {
  const double row_bytes =
      2.0 * double(shape.kv_heads * shape.head_dim * (gradients ? shape.dkv_wire_bytes : shape.dtype_bytes));
  int64_t busiest = 0;  // rows the busiest rank moves one way, over the samples
  for (int r = 0; samples > 0 && r < plans[0].cp; ++r) {
    int64_t received = 0, sent = 0;
    for (size_t b = 0; b < samples; ++b)
      received += plans[b].recv_rows[size_t(r)], sent += plans[b].send_rows[size_t(r)];
    busiest = std::max({busiest, received, sent});
  }
  return busiest > 0 ? link.hop_latency_us + double(busiest) * row_bytes / link.bytes_per_us : 0.0;
}

double gather_exchange_us(const KvGatherPlan& plan, const RingShape& shape, bool gradients, const LinkModel& link) {
  return gather_exchange_us(&plan, 1, shape, gradients, link);
}

RingTimePrediction gather_time_from_calls(const GatherCallTimes& calls, const KvGatherPlan& plan,
                                          const RingShape& shape, const LinkModel& link) {
  const size_t cp = size_t(plan.cp);
  RT_CHECK(calls.own_fwd.size() == cp && calls.gathered_fwd.size() == cp && calls.own_bwd_a.size() == cp &&
               calls.own_bwd_b.size() == cp && calls.gathered_bwd.size() == cp && plan.recv_rows.size() == cp &&
               plan.send_rows.size() == cp,
           "gather_time_from_calls: needs one time per rank (" << cp << ") for each of the five calls");
  const double c_kv = gather_exchange_us(plan, shape, false, link), c_dkv = gather_exchange_us(plan, shape, true, link);
  RingTimePrediction p;
  RT_CHECK(calls.one_fwd.empty() || calls.one_fwd.size() == cp,
           "gather_time_from_calls: one_fwd needs one time per rank (" << cp << ") or none");
  RT_CHECK(calls.one_bwd.empty() || calls.one_bwd.size() == cp,
           "gather_time_from_calls: one_bwd needs one time per rank (" << cp << ") or none");
  for (size_t r = 0; r < cp; ++r) {
    const double own_f = calls.own_fwd[r], got_f = calls.gathered_fwd[r];
    const double one_f = calls.one_fwd.empty() ? 0.0 : calls.one_fwd[r];
    const double own_a = calls.own_bwd_a[r], own_b = calls.own_bwd_b[r], got_b = calls.gathered_bwd[r];
    const double one_b = calls.one_bwd.empty() ? 0.0 : calls.one_bwd[r];
    p.fwd_compute_us = std::max(p.fwd_compute_us, one_f > 0 ? one_f : own_f + got_f);
    p.bwd_compute_us = std::max(p.bwd_compute_us, one_b > 0 ? one_b : own_a + own_b + got_b);
    const bool receives = plan.recv_rows[r] > 0;             // else its own call needs no one
    const bool returns = receives || plan.send_rows[r] > 0;  // else no dK/dV row comes or goes
    if (one_f > 0) p.fwd_us = std::max(p.fwd_us, (receives ? c_kv : 0.0) + one_f);  // the launch waits for it
    else p.fwd_us = std::max(p.fwd_us, (receives ? std::max(own_f, c_kv) : own_f) + got_f);
    if (one_b > 0) p.bwd_us = std::max(p.bwd_us, (receives ? c_kv : 0.0) + one_b + (returns ? c_dkv : 0.0));
    else p.bwd_us = std::max(p.bwd_us, (receives ? std::max(own_a, c_kv) : own_a) + got_b +
                                           (returns ? std::max(own_b, c_dkv) : own_b));
  }
  const double kv_row = 2.0 * double(shape.kv_heads * shape.head_dim * shape.dtype_bytes);
  const double dkv_row = 2.0 * double(shape.kv_heads * shape.head_dim * shape.dkv_wire_bytes);
  p.bytes_per_layer = plan.bytes_per_layer(kv_row, dkv_row);
  p.ring_bytes_per_layer =
      ring_hop_plan_full(plan.cp).bytes_per_layer(kv_row * double(plan.n), dkv_row * double(plan.n));
  return p;
}

GatherCallTimes predict_gather_calls(const KvGatherTiles& tiles, const KvGatherPlan& plan, const RingShape& shape,
                                     const LinkModel& link) {
  const int cp = plan.cp;
  RT_CHECK(tiles.own.runs.size() == size_t(cp) * size_t(cp) && tiles.gathered.runs.size() == tiles.own.runs.size(),
           "predict_gather_calls: tiles must be kv_gather_tiles of " << cp << " ranks");
  const KernelTimeModel fwd = gather_kernel_time_model(false, shape.head_dim),
                        bwd = gather_kernel_time_model(true, shape.head_dim);
  auto call = [&](const RingTileCost& c, const KernelTimeModel& m, int r) {
    const size_t i = size_t(r * cp + r);
    return c.runs[i] ? call_time_us(m, c.full_tiles[i], c.partial_tiles[i], c.active[i], shape.heads) : 0.0;
  };
  GatherCallTimes calls;
  for (int r = 0; r < cp; ++r) {
    calls.own_fwd.push_back(call(tiles.own, fwd, r));
    calls.gathered_fwd.push_back(call(tiles.gathered, fwd, r));
    const bool one = gather_fwd_one_launch_for_batch(&tiles, &plan, 1, r, shape, link);
    calls.one_fwd.push_back(one ? calls.own_fwd.back() + calls.gathered_fwd.back() - fwd.call_us : 0.0);
    const OwnBwdSplit split = predict_own_bwd_split(tiles, plan, r, shape, link);  // A = the whole call unsplit
    calls.own_bwd_a.push_back(split.a_us);
    calls.own_bwd_b.push_back(split.b_us);
    calls.gathered_bwd.push_back(call(tiles.gathered, bwd, r));
    const bool one_b = gather_bwd_one_launch_for_batch(&tiles, &plan, 1, r, split, shape, link);
    calls.one_bwd.push_back(one_b ? gather_bwd_own_whole_us(split, bwd.call_us) + calls.gathered_bwd.back() -
                                        bwd.call_us
                                  : 0.0);
  }
  return calls;
}

RingTimePrediction predict_gather_time(const KvGatherTiles& tiles, const KvGatherPlan& plan, const RingTileCost& whole,
                                       const RingShape& shape, const LinkModel& link) {
  RT_CHECK(whole.runs.size() == 1, "predict_gather_time: whole must be the tiles of one rank");
  const int cp = plan.cp;
  // The ideal is one whole call / cp in the whole calls' model (kernel_time_model), the same for every scheme.
  const KernelTimeModel fwd = kernel_time_model(false, shape.head_dim), bwd = kernel_time_model(true, shape.head_dim);
  RingTimePrediction p = gather_time_from_calls(predict_gather_calls(tiles, plan, shape, link), plan, shape, link);
  p.ideal_fwd_us =
      call_time_us(fwd, whole.full_tiles[0], whole.partial_tiles[0], whole.active[0], shape.heads) / double(cp);
  p.ideal_bwd_us =
      call_time_us(bwd, whole.full_tiles[0], whole.partial_tiles[0], whole.active[0], shape.heads) / double(cp);
  return p;
}

}  // namespace rt
