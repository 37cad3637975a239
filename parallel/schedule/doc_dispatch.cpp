// The mask-area dispatch of packed documents over a ring (parallel/schedule/doc_dispatch.h).
#include "parallel/schedule/doc_dispatch.h"

#include <algorithm>
#include <numeric>

#include "kernels/tensor.h"
#include "parallel/schedule/ring_time_model.h"

namespace rt {

namespace {

// The greedy's weights: a call costs call_us plus full_us per 64 x 128 pairs (16 heads). These are the hand
// estimates the ring time model had before its fit (bench/NOTES.md "Ring time model"), kept for the greedy on
// purpose: priced by the fitted model itself, the dispatch they build is faster than the one the fitted
// coefficients build on 9 of 12 stdlib / short / short_long / one samples at 64K-512K, and it is the assignment
// measured on the H200. The ring's predicted time (ring_time_model.h) uses the fitted coefficients.
constexpr KernelTimeModel kGreedyWeights{128, 20.0, 0.0030, 0.0070, 0.0105};

}  // namespace

int64_t dispatch_chunk_tokens(int64_t T, int cp) {
  const int64_t n = T / cp, target = std::max<int64_t>(128, n / 16);
  int64_t best = 1;
  for (int64_t c = 1; c * c <= n; ++c)
    if (n % c == 0) {
      if (c <= target) best = std::max(best, c);
      if (n / c <= target) best = std::max(best, n / c);
    }
  return best;
}

std::vector<int64_t> dispatch_ring_order(const std::vector<int64_t>& doc_start, int cp, int64_t chunk) {
  return ring_order_from_spans(dispatch_ring_spans(document_begins(doc_start), cp, chunk), int64_t(doc_start.size()),
                               cp);
}

std::vector<RingSpan> dispatch_ring_spans(const std::vector<int64_t>& begins, int cp, int64_t chunk,
                                          const KernelTimeModel* weights) {
  const int64_t T = begins.empty() ? 0 : begins.back();
  RT_CHECK(cp >= 1 && T > 0 && T % cp == 0, "dispatch: seq_len " << T << " is not divisible by cp = " << cp);
  const int64_t n = T / cp;
  if (chunk <= 0) chunk = dispatch_chunk_tokens(T, cp);
  RT_CHECK(n % chunk == 0, "dispatch: chunk " << chunk << " does not divide the " << n << " tokens of a rank");
  const int64_t M = T / chunk, per_rank = n / chunk;
  size_t doc = 0;  // the document of the run being counted
  // Visible pairs between chunks: pairs[k] lists (j, pairs with queries in chunk k and keys in chunk j), j <= k.
  // For query p of document start s, keys [s, p]: chunk j < chunk(p) holds min(chunk, jb - max(s, ja)) of them.
  std::vector<std::vector<std::pair<int64_t, double>>> pairs(static_cast<size_t>(M));
  std::vector<double> area(static_cast<size_t>(M), 0.0);  // (M) pairs with queries in the chunk
  for (int64_t k = 0; k < M; ++k) {
    const int64_t a = k * chunk, b = a + chunk;
    std::vector<double> row;  // (k + 1 - first chunk) pairs per key chunk
    while (begins[doc + 1] <= a) ++doc;
    const int64_t first = begins[doc] / chunk;
    row.assign(size_t(k - first + 1), 0.0);
    std::vector<int64_t> middle(size_t(k - first + 2), 0);  // (k + 2 - first) differences: chunk for j in (js, k)
    // Per run [u, v) of queries of one document start s: keys in earlier chunks in closed form (integers, exact).
    for (int64_t u = a; u < b;) {
      while (begins[doc + 1] <= u) ++doc;
      const int64_t s = begins[doc], v = std::min(b, begins[doc + 1]), cnt = v - u, js = s / chunk;
      const int64_t own = cnt * (u - a + 1) + cnt * (cnt - 1) / 2;  // sum over the run of p - a + 1
      if (js == k) {
        row[size_t(k - first)] += double(own + cnt * (a - s));  // sum of p - s + 1
      } else {
        row[size_t(js - first)] += double(cnt * ((js + 1) * chunk - s));
        middle[size_t(js + 1 - first)] += cnt * chunk, middle[size_t(k - first)] -= cnt * chunk;
        row[size_t(k - first)] += double(own);
      }
      u = v;
    }
    int64_t run = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      run += middle[i];
      row[i] += double(run);
    }
    for (size_t i = 0; i < row.size(); ++i)
      if (row[i] > 0) {
        pairs[size_t(k)].push_back({first + int64_t(i), row[i]});
        area[size_t(k)] += row[i];
      }
  }
  // The reverse lists: later[j] = (k, pairs) with queries in k > j seeing keys in j.
  std::vector<std::vector<std::pair<int64_t, double>>> later(static_cast<size_t>(M));
  for (int64_t k = 0; k < M; ++k)
    for (const auto& e : pairs[size_t(k)])
      if (e.first != k) later[size_t(e.first)].push_back({k, e.second});

  // Greedy: largest area first; each chunk to the rank (with room) that leaves the least critical path.
  const KernelTimeModel model = weights ? *weights : kGreedyWeights;
  const double pair_us = model.full_us / double(kCostQueryTileRows * kCostKeyTileRows);
  auto cost = [&](double w) { return w > 0 ? model.call_us + 16 * pair_us * w : 0.0; };
  std::vector<double> W(size_t(cp) * size_t(cp), 0.0);  // (cp*cp) pairs of rank r's queries x rank s's keys
  std::vector<int> rank_of(static_cast<size_t>(M), -1), held(static_cast<size_t>(cp), 0);
  std::vector<int64_t> by_area(static_cast<size_t>(M));
  std::iota(by_area.begin(), by_area.end(), int64_t(0));
  std::stable_sort(by_area.begin(), by_area.end(), [&](int64_t x, int64_t y) { return area[size_t(x)] > area[size_t(y)]; });
  std::vector<double> trial(W.size());
  for (int64_t k : by_area) {
    int best = -1;
    double best_path = 0, best_load = 0;
    for (int r = 0; r < cp; ++r) {
      if (held[size_t(r)] == per_rank) continue;
      trial = W;
      for (const auto& e : pairs[size_t(k)]) {
        const int s = e.first == k ? r : rank_of[size_t(e.first)];
        if (s >= 0) trial[size_t(r * cp + s)] += e.second;
      }
      for (const auto& e : later[size_t(k)]) {
        const int q = rank_of[size_t(e.first)];
        if (q >= 0) trial[size_t(q * cp + r)] += e.second;
      }
      // The critical path, plus the spread of the calls (sum of squares, scaled to time): with few chunks placed
      // most steps tie on the path, and the spread keeps the calls of a step level for the chunks still to come.
      double path = 0, load = 0, sq = 0, sum = 0;
      for (int t = 0; t < cp; ++t) {
        double mx = 0;
        for (int q = 0; q < cp; ++q) {
          const double c = cost(trial[size_t(q * cp + ((q - t) % cp + cp) % cp)]);
          mx = std::max(mx, c), sq += c * c, sum += c;
        }
        path += mx;
      }
      if (sum > 0) path += sq / sum;
      for (int s = 0; s < cp; ++s) load += trial[size_t(r * cp + s)];
      if (best < 0 || path < best_path * (1 - 1e-12) || (path <= best_path * (1 + 1e-12) && load < best_load)) {
        best = r, best_path = path, best_load = load;
      }
    }
    rank_of[size_t(k)] = best;
    held[size_t(best)] += 1;
    for (const auto& e : pairs[size_t(k)]) {
      const int s = e.first == k ? best : rank_of[size_t(e.first)];
      if (s >= 0 && e.first != k) W[size_t(best * cp + s)] += e.second;
      if (e.first == k) W[size_t(best * cp + best)] += e.second;
    }
    for (const auto& e : later[size_t(k)]) {
      const int q = rank_of[size_t(e.first)];
      if (q >= 0) W[size_t(q * cp + best)] += e.second;
    }
  }
  std::vector<RingSpan> spans;  // in position order, adjacent chunks of one rank joined
  for (int64_t k = 0; k < M; ++k) {
    if (!spans.empty() && spans.back().rank == rank_of[size_t(k)])
      spans.back().len += chunk;
    else
      spans.push_back({k * chunk, chunk, rank_of[size_t(k)]});
  }
  return spans;
}

}  // namespace rt
