// Ring work per step with packed documents, the imbalance metric and the balanced assignment
// (parallel/schedule/doc_balance.h).
#include "parallel/schedule/doc_balance.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "kernels/tensor.h"
#include "parallel/schedule/doc_dispatch.h"
#include "parallel/schedule/doc_gather_pack.h"
#include "parallel/schedule/doc_pack.h"
#include "parallel/schedule/gather_plan.h"

namespace rt {

std::vector<int64_t> doc_starts_from_lengths(const std::vector<int64_t>& lengths, int64_t T, size_t first_doc,
                                             int64_t offset) {
  RT_CHECK(!lengths.empty(), "document lengths: the list is empty");
  std::vector<int64_t> start(static_cast<size_t>(T));
  int64_t p = 0;
  size_t k = first_doc % lengths.size();
  int64_t left = lengths[k] - offset;  // tokens of the current document still to place
  int64_t cur = 0;
  while (p < T) {
    if (left <= 0) {
      k = (k + 1) % lengths.size();
      left = lengths[k];
      cur = p;
    }
    const int64_t take = std::min(left, T - p);
    for (int64_t t = 0; t < take; ++t) start[size_t(p + t)] = cur;
    p += take;
    left -= take;
  }
  return start;
}

std::vector<int64_t> layout_ring_order(Layout layout, int64_t T, int cp) {
  std::vector<int64_t> order;
  order.reserve(size_t(T));
  for (int s = 0; s < cp; ++s) {
    const std::vector<int64_t> pos = layout_positions(layout, T, cp, s);
    order.insert(order.end(), pos.begin(), pos.end());
  }
  return order;
}

std::vector<double> ring_pair_counts(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order,
                                     int cp) {
  const int64_t T = int64_t(doc_start.size()), n = T / cp;
  RT_CHECK(int64_t(order.size()) == T && T % cp == 0, "ring_pair_counts: order has " << order.size()
                                                                                   << " entries for T=" << T);
  std::vector<int> owner(static_cast<size_t>(T), -1);  // (T) rank holding each position
  for (int64_t c = 0; c < T; ++c) owner[size_t(order[size_t(c)])] = int(c / n);
  std::vector<double> work(size_t(cp) * size_t(cp), 0.0);
  std::vector<double> seen(static_cast<size_t>(cp), 0.0);  // keys of the current document so far, per rank
  for (int64_t p = 0; p < T; ++p) {
    if (doc_start[size_t(p)] == p) std::fill(seen.begin(), seen.end(), 0.0);
    const int a = owner[size_t(p)];
    seen[size_t(a)] += 1;
    double* row = &work[size_t(a) * size_t(cp)];
    for (int s = 0; s < cp; ++s) row[s] += seen[size_t(s)];
  }
  return work;
}

double ring_imbalance(const std::vector<double>& work, int cp) {
  double sum_max = 0, sum_mean = 0;
  for (int t = 0; t < cp; ++t) {
    double mx = 0, total = 0;
    for (int r = 0; r < cp; ++r) {
      const double w = work[size_t(r) * size_t(cp) + size_t(((r - t) % cp + cp) % cp)];
      mx = std::max(mx, w);
      total += w;
    }
    sum_max += mx;
    sum_mean += total / cp;
  }
  return sum_mean > 0 ? sum_max / sum_mean : 1.0;
}

namespace {

// The spans of a fixed layout (parallel/schedule/layout.h).
std::vector<RingSpan> layout_spans(Layout layout, int64_t T, int cp) {
  const int64_t n = T / cp;
  std::vector<RingSpan> spans;
  if (layout == Layout::contiguous) {
    for (int r = 0; r < cp; ++r) spans.push_back({r * n, n, r});
  } else if (layout == Layout::zigzag) {  // chunk c of n/2 tokens on rank c, chunk 2cp-1-c on rank c
    for (int c = 0; c < 2 * cp; ++c) spans.push_back({c * (n / 2), n / 2, c < cp ? c : 2 * cp - 1 - c});
  } else {  // striped: position p on rank p mod cp
    spans.resize(size_t(T));
    for (int64_t p = 0, r = 0; p < T; ++p, r = r + 1 == cp ? 0 : r + 1) spans[size_t(p)] = {p, 1, int(r)};
  }
  return spans;
}

}  // namespace

std::string RingCandidate::label() const {
  std::string layout = name;
  if (name == "docpack") layout += "(" + std::to_string(split_min) + (run_max ? "/runs)" : ")");
  if (name == "gatherpack") {
    char share[32];
    std::snprintf(share, sizeof share, "(%g)", piece_share);
    layout += share;
  }
  return gather ? "gather:" + layout : layout;
}

std::vector<RingCandidate> ring_candidates(const std::vector<int64_t>& doc_start, int cp, const RingShape& shape,
                                           bool with_orders, bool with_gather) {
  const int64_t T = int64_t(doc_start.size());
  RT_CHECK(cp >= 1 && T > 0 && T % cp == 0, "layout balanced: seq_len " << T << " is not divisible by cp = " << cp
                                                                        << "; use a multiple of " << cp);
  const std::vector<int64_t> begins = document_begins(doc_start);  // (documents + 1) shared by every candidate
  const RingTileCost whole = ring_tile_cost_for_spans(doc_start, {RingSpan{0, T, 0}}, 1);
  std::vector<RingCandidate> out;
  // same_as: the index of an earlier candidate known to have these spans (else searched).
  // fixed: the layout whose tiles lie in closed form (else from the spans).
  auto add = [&](const std::string& name, int64_t split_min, std::vector<RingSpan> spans, int64_t run_max = 0,
                 int same_as = -1, Layout fixed = Layout::balanced) {
    RingCandidate c;
    c.name = name;
    c.split_min = split_min;
    c.run_max = run_max;
    c.spans = std::move(spans);
    const RingCandidate* same = same_as >= 0 ? &out[size_t(same_as)] : nullptr;  // the same assignment: the same
    for (const RingCandidate& o : out)                                           // prediction
      if (!same && o.spans.size() == c.spans.size() && o.spans == c.spans) same = &o;
    if (same) {
      c.hops = same->hops, c.tiles = same->tiles, c.time = same->time;
    } else {
      c.hops = ring_hop_plan_for_spans(begins, c.spans, cp);
      const std::vector<double> runs(c.hops.visible.begin(), c.hops.visible.end());  // (cp*cp) calls with a pair
      c.tiles = ring_tile_cost_for_rows(
          doc_start, fixed == Layout::balanced ? ring_tile_rows(c.spans, T, cp) : ring_tile_rows(fixed, T, cp), cp, runs);
      c.time = predict_ring_time(c.tiles, c.hops, whole, T / cp, shape);
    }
    if (with_orders) c.order = ring_order_from_spans(c.spans, T, cp);
    out.push_back(std::move(c));
  };
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped})
    if (l != Layout::zigzag || T % (2 * int64_t(cp)) == 0) add(layout_name(l), 0, layout_spans(l, T, cp), 0, -1, l);
  // doc-striped: each document dealt round-robin from the rank after the one the previous document ended on, the
  // ranks' token counts kept equal. No rank fills before the last position, so that is position p on rank p mod cp:
  // striped's assignment for every sample; it stays a row of the plan and shares striped's prediction.
  add("doc-striped", 0, out.back().spans, 0, int(out.size()) - 1);
  add("dispatch", 0, dispatch_ring_spans(begins, cp));
  for (int64_t split_min : docpack_split_thresholds(T, cp))
    for (int64_t run_max : {int64_t(0), T / cp / 4})
      add("docpack", split_min, docpack_ring_spans(begins, cp, split_min, run_max), run_max);
  if (!with_gather || cp == 1) return out;
  // The gather scheme (parallel/schedule/gather_plan.h) over each distinct assignment but the striped ones (which
  // gather
  // nearly every row), and over its own layout, gatherpack.
  const size_t ring_count = out.size();
  auto add_gather = [&](const RingCandidate* from, const std::string& name, std::vector<RingSpan> spans,
                        double piece_share = 0) {
    RingCandidate c;
    c.gather = true;
    c.piece_share = piece_share;
    c.name = from ? from->name : name;
    c.split_min = from ? from->split_min : 0;
    c.run_max = from ? from->run_max : 0;
    c.spans = from ? from->spans : std::move(spans);
    for (size_t o = ring_count; o < out.size(); ++o)
      if (out[o].spans == c.spans) return;  // priced already
    const KvGatherPlan plan = kv_gather_plan_for_spans(begins, c.spans, cp);
    c.time = predict_gather_time(kv_gather_tiles(doc_start, c.spans, plan, cp), plan, whole, shape);
    if (with_orders) c.order = ring_order_from_spans(c.spans, T, cp);
    out.push_back(std::move(c));
  };
  for (size_t i = 0; i < ring_count; ++i)
    if (out[i].name != "striped" && out[i].name != "doc-striped") add_gather(&out[i], "", {});
  for (double share : kGatherPackShares)
    add_gather(nullptr, "gatherpack", gather_pack_spans(begins, cp, share), share);
  return out;
}

size_t pick_balanced(const std::vector<RingCandidate>& candidates) {
  RT_CHECK(!candidates.empty(), "pick_balanced: no candidate");
  size_t best = 0;
  for (size_t c = 1; c < candidates.size(); ++c)
    if (candidates[c].time.total_us() < candidates[best].time.total_us() * (1 - 1e-12)) best = c;
  return best;
}

RingChoice balanced_ring_choice(const std::vector<int64_t>& doc_start, int cp, const RingShape& shape,
                                bool with_gather, bool gather_only) {
  std::vector<RingCandidate> candidates =
      ring_candidates(doc_start, cp, shape, /*with_orders=*/false, with_gather || gather_only);
  if (gather_only && cp > 1)
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(), [](const RingCandidate& c) { return !c.gather; }),
                     candidates.end());
  const RingCandidate& best = candidates[pick_balanced(candidates)];
  RingChoice choice;
  choice.order = ring_order_from_spans(best.spans, int64_t(doc_start.size()), cp);
  choice.label = best.label();
  choice.gather = best.gather;
  choice.time = best.time;
  return choice;
}

std::vector<int64_t> balanced_ring_order(const std::vector<int64_t>& doc_start, int cp, std::string* chosen,
                                         const RingShape& shape) {
  const std::vector<RingCandidate> candidates = ring_candidates(doc_start, cp, shape, /*with_orders=*/false);
  const size_t best = pick_balanced(candidates);
  if (chosen) *chosen = candidates[best].label();
  return ring_order_from_spans(candidates[best].spans, int64_t(doc_start.size()), cp);
}

std::vector<int64_t> read_doc_lengths(const std::string& path) {
  std::ifstream in(path);
  RT_CHECK(in.good(), "document lengths: cannot open '" << path << "'; give a file with one length per line");
  std::vector<int64_t> lengths;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b == std::string::npos) continue;
    const std::string field = line.substr(b, e - b + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(field, &used);
    } catch (...) {
      used = 0;
    }
    RT_CHECK(used == field.size() && v > 0, "document lengths '" << path << "' line " << lineno << ": '" << field
                                                                  << "' is not a positive integer");
    lengths.push_back(v);
  }
  RT_CHECK(!lengths.empty(), "document lengths '" << path << "' holds no length");
  return lengths;
}

}  // namespace rt
