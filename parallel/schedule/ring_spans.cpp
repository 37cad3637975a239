// Ring assignments as spans of positions (parallel/schedule/ring_spans.h).
#include "parallel/schedule/ring_spans.h"

#include <algorithm>

#include "kernels/tensor.h"

namespace rt {

std::vector<int64_t> document_begins(const std::vector<int64_t>& doc_start) {
  const int64_t T = int64_t(doc_start.size());
  std::vector<int64_t> begins;  // (documents + 1)
  for (int64_t p = 0; p < T; ++p) {
    const int64_t s = doc_start[size_t(p)];
    if (p == 0 || s != doc_start[size_t(p - 1)]) {
      RT_CHECK(s == p, "documents: position " << p << " has document start " << s << " but position " << p - 1
                                              << " another one; a document's positions must be consecutive and "
                                              << "its start its first position");
      begins.push_back(p);
    }
  }
  begins.push_back(T);
  return begins;
}

std::vector<RingSpan> ring_spans_from_order(const std::vector<int64_t>& order, int cp) {
  const int64_t T = int64_t(order.size());
  RT_CHECK(cp >= 1 && T > 0 && T % cp == 0, "ring spans: order has " << T << " entries, not a multiple of cp = " << cp);
  const int64_t n = T / cp;
  std::vector<int> owner(static_cast<size_t>(T), -1);  // (T) rank of each position
  for (int r = 0; r < cp; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = order[size_t(r * n + i)];
      RT_CHECK(p >= 0 && p < T && owner[size_t(p)] < 0 && (i == 0 || p > order[size_t(r * n + i - 1)]),
               "ring spans: rank " << r << " local row " << i << " holds position " << p
                                   << "; each rank's positions must increase and the order be a permutation of [0, "
                                   << T << ")");
      owner[size_t(p)] = r;
    }
  std::vector<RingSpan> spans;
  for (int64_t p = 0; p < T; ++p) {
    if (spans.empty() || spans.back().rank != owner[size_t(p)]) spans.push_back({p, 0, owner[size_t(p)]});
    ++spans.back().len;
  }
  return spans;
}

std::vector<int64_t> ring_order_from_spans(const std::vector<RingSpan>& spans, int64_t T, int cp) {
  RT_CHECK(cp >= 1 && T % cp == 0, "ring spans: T = " << T << " is not a multiple of cp = " << cp);
  const int64_t n = T / cp;
  std::vector<int64_t> order(static_cast<size_t>(T));  // (T) ring order
  std::vector<int64_t> next(static_cast<size_t>(cp));   // (cp) next column of each rank
  for (int r = 0; r < cp; ++r) next[size_t(r)] = r * n;
  int64_t p = 0;
  for (const RingSpan& s : spans) {
    RT_CHECK(s.begin == p && s.len > 0 && s.rank >= 0 && s.rank < cp && next[size_t(s.rank)] + s.len <= (s.rank + 1) * n,
             "ring spans: span at " << s.begin << " (length " << s.len << ", rank " << s.rank
                                    << ") does not continue position " << p << " or overfills its rank");
    for (int64_t i = 0; i < s.len; ++i) order[size_t(next[size_t(s.rank)]++)] = p++;
  }
  RT_CHECK(p == T, "ring spans: the spans cover " << p << " of " << T << " positions");
  return order;
}

RingHopPlan ring_hop_plan_for_spans(const std::vector<int64_t>& begins, const std::vector<RingSpan>& spans, int cp) {
  RT_CHECK(cp >= 1 && cp <= 64, "ring_hop_plan: cp = " << cp << " must be in [1, 64]");
  std::vector<uint64_t> sees(static_cast<size_t>(cp), 0);  // (cp) bit s of sees[r]: rank r sees keys of rank s
  uint64_t held = 0;                                       // ranks holding a position of the current document so far
  size_t doc = 0;                                          // begins[doc] <= the piece's start < begins[doc + 1]
  for (const RingSpan& s : spans) {
    const uint64_t bit = uint64_t(1) << s.rank;
    for (int64_t p = s.begin, end = s.begin + s.len; p < end;) {  // the span's pieces, one per document
      while (begins[doc + 1] <= p) ++doc;
      held = p == begins[doc] ? bit : held | bit;
      sees[size_t(s.rank)] |= held;
      p = std::min(end, begins[doc + 1]);
    }
  }
  RingHopPlan plan;
  plan.cp = cp;
  plan.visible.assign(size_t(cp) * size_t(cp), 0);
  for (int r = 0; r < cp; ++r)
    for (int s = 0; s < cp; ++s) plan.visible[size_t(r * cp + s)] = (sees[size_t(r)] >> s) & 1;
  finish_hop_plan(&plan);
  return plan;
}

}  // namespace rt
