// The document-packed ring order (parallel/schedule/doc_pack.h).
#include "parallel/schedule/doc_pack.h"

#include <algorithm>
#include <numeric>

#include "kernels/tensor.h"

namespace rt {
namespace {

struct Doc {
  int64_t begin, len;
};

double tri(int64_t L) { return double(L) * double(L + 1) / 2; }

}  // namespace

std::vector<int64_t> docpack_split_thresholds(int64_t T, int cp) {
  const int64_t n = T / cp, floor_len = 2 * int64_t(cp) * 64;
  std::vector<int64_t> out;
  for (int64_t t : {2 * int64_t(cp) * 128, n, n / 2, n / 4, n / 8})
    if (t >= floor_len) out.push_back(t);
  if (out.empty()) out.push_back(floor_len);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int64_t> docpack_ring_order(const std::vector<int64_t>& doc_start, int cp, int64_t split_min,
                                        int64_t run_max) {
  const int64_t T = int64_t(doc_start.size());
  return ring_order_from_spans(docpack_ring_spans(document_begins(doc_start), cp, split_min, run_max), T, cp);
}

std::vector<RingSpan> docpack_ring_spans(const std::vector<int64_t>& begins, int cp, int64_t split_min,
                                         int64_t run_max) {
  const int64_t T = begins.empty() ? 0 : begins.back();
  RT_CHECK(cp >= 1 && T > 0 && T % cp == 0, "docpack layout: seq_len " << T << " is not divisible by cp = " << cp);
  RT_CHECK(split_min >= 1, "docpack layout: split_min " << split_min << " must be at least 1");
  const int64_t n = T / cp;
  std::vector<Doc> docs;
  for (size_t i = 0; i + 1 < begins.size(); ++i) docs.push_back({begins[i], begins[i + 1] - begins[i]});
  std::vector<RingSpan> given;  // the pieces as given, in any order
  std::vector<int64_t> room(static_cast<size_t>(cp), n);  // positions each rank can still take
  std::vector<double> load(static_cast<size_t>(cp), 0.0);  // step-0 visible pairs so far, per rank
  auto give = [&](int r, int64_t b, int64_t len) {
    if (len > 0) given.push_back({b, len, r});
    room[size_t(r)] -= len;
  };
  std::vector<int> by_room(static_cast<size_t>(cp));  // ranks, most room first (ties: lower rank)
  auto sort_by_room = [&] {
    std::iota(by_room.begin(), by_room.end(), 0);
    std::stable_sort(by_room.begin(), by_room.end(), [&](int a, int b) { return room[size_t(a)] > room[size_t(b)]; });
  };

  // Long documents: 2cp pieces dealt zigzag; the L mod 2cp remainder tokens to the ranks with the most room.
  std::vector<Doc> shorts, leftover;
  for (const Doc& d : docs) {
    if (d.len < split_min && d.len <= n) {
      shorts.push_back(d);
      continue;
    }
    const int64_t pieces = 2 * int64_t(cp), base = d.len / pieces;
    int64_t extra = d.len - base * pieces;
    std::vector<int64_t> size(static_cast<size_t>(pieces), base);  // piece c's length
    sort_by_room();
    for (int pass = 0; pass < 2 && extra > 0; ++pass)
      for (int i = 0; i < cp && extra > 0; ++i, --extra) {
        const int r = by_room[size_t(i)];
        size[size_t(pass == 0 ? r : pieces - 1 - r)] += 1;
      }
    bool fits = true;  // the ranks' rooms differ by a few tokens at most; near full, cut the document instead
    for (int r = 0; r < cp; ++r) fits = fits && size[size_t(r)] + size[size_t(pieces - 1 - r)] <= room[size_t(r)];
    if (!fits) {
      leftover.push_back(d);
      continue;
    }
    int64_t b = d.begin;
    for (int64_t c = 0; c < pieces; ++c) {
      const int r = int(c < cp ? c : pieces - 1 - c);
      give(r, b, size[size_t(c)]);
      b += size[size_t(c)];
    }
    for (int r = 0; r < cp; ++r) {
      const int64_t lo = size[size_t(r)], hi = size[size_t(pieces - 1 - r)];
      load[size_t(r)] += tri(lo) + tri(hi) + double(lo) * double(hi);
    }
  }

  // Short documents whole, most pairs first, to the least-loaded rank with room (LPT). With run_max, runs of
  // adjacent short documents up to run_max tokens go as one item: a rank's documents then sit side by side in
  // the sequence, so its query tiles across a document edge span no other rank's keys. A run that fits no rank
  // is broken into its documents; a document that fits none is cut into the room below.
  struct Item {
    int64_t begin, len;
    double pairs;
    size_t first, count;  // shorts[first, first + count)
  };
  std::vector<Item> items;
  for (size_t i = 0; i < shorts.size(); ++i) {
    const Doc& d = shorts[i];
    const bool joins = !items.empty() && items.back().begin + items.back().len == d.begin &&
                       items.back().len + d.len <= run_max;
    if (joins) {
      items.back().len += d.len, items.back().pairs += tri(d.len), items.back().count += 1;
    } else {
      items.push_back({d.begin, d.len, tri(d.len), i, 1});
    }
  }
  auto heavier = [](const Item& a, const Item& b) { return a.pairs > b.pairs || (a.pairs == b.pairs && a.begin < b.begin); };
  std::sort(items.begin(), items.end(), heavier);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item it = items[i];
    int best = -1;
    for (int r = 0; r < cp; ++r) {
      if (room[size_t(r)] < it.len) continue;
      if (best < 0 || load[size_t(r)] < load[size_t(best)] ||
          (load[size_t(r)] == load[size_t(best)] && room[size_t(r)] > room[size_t(best)]))
        best = r;
    }
    if (best >= 0) {
      give(best, it.begin, it.len);
      load[size_t(best)] += it.pairs;
    } else if (it.count > 1) {
      for (size_t k = it.first; k < it.first + it.count; ++k)
        items.push_back({shorts[k].begin, shorts[k].len, tri(shorts[k].len), k, 1});
      std::sort(items.begin() + int64_t(i) + 1, items.end(), heavier);
    } else {
      leftover.push_back({it.begin, it.len});
    }
  }
  // Leftovers in position order fill the ranks' room in ring order: a document cut at a rank's end continues on
  // the next rank with room, so its later part sees its earlier part one ring step later (step 1 where every rank
  // has room): the cut documents' extra calls fall on few steps, each shared by every rank, not one per cut.
  std::sort(leftover.begin(), leftover.end(), [](const Doc& a, const Doc& b) { return a.begin < b.begin; });
  int r = 0;
  for (const Doc& d : leftover) {
    int64_t b = d.begin, left = d.len;
    while (left > 0) {
      for (int tries = 0; room[size_t(r)] == 0 && tries < cp; ++tries) r = (r + 1) % cp;
      const int64_t take = std::min(left, room[size_t(r)]);
      RT_CHECK(take > 0, "docpack layout: no room left for position " << b << " (internal error)");
      give(r, b, take);
      load[size_t(r)] += tri(take);
      b += take;
      left -= take;
    }
  }

  for (int k = 0; k < cp; ++k)
    RT_CHECK(room[size_t(k)] == 0, "docpack layout: rank " << k << " holds " << n - room[size_t(k)]
                                                           << " positions, not " << n << " (internal error)");
  std::sort(given.begin(), given.end(), [](const RingSpan& a, const RingSpan& b) { return a.begin < b.begin; });
  std::vector<RingSpan> spans;  // in position order, adjacent pieces of one rank joined
  for (const RingSpan& g : given) {
    if (!spans.empty() && spans.back().rank == g.rank && spans.back().begin + spans.back().len == g.begin)
      spans.back().len += g.len;
    else
      spans.push_back(g);
  }
  return spans;
}

}  // namespace rt
