// The gather layout (parallel/schedule/doc_gather_pack.h).
#include "parallel/schedule/doc_gather_pack.h"

#include <algorithm>
#include <cmath>

#include "kernels/tensor.h"

namespace rt {
namespace {

// A run of consecutive positions of one document: `offset` tokens into a document starting at `doc`.
struct Run {
  int64_t begin = 0, len = 0, offset = 0;
};

// Visible pairs of the queries of a run: each query sees the keys from its document's start to itself.
double run_area(const Run& r) {
  return double(r.len) * double(r.offset) + double(r.len) * double(r.len + 1) / 2;
}

struct Piece {
  std::vector<Run> runs;  // one (a whole document) or two (a zigzag pair of chunks)
  double area = 0;
  int64_t tokens = 0;
};

}  // namespace

std::vector<RingSpan> gather_pack_spans(const std::vector<int64_t>& begins, int cp, double piece_share) {
  RT_CHECK(cp >= 1 && begins.size() >= 2, "gather_pack: needs cp >= 1 and the sample's document begins");
  const int64_t T = begins.back();
  RT_CHECK(T % cp == 0, "gather_pack: T = " << T << " is not a multiple of cp = " << cp);
  RT_CHECK(piece_share > 0, "gather_pack: piece_share " << piece_share << " must be positive");
  const int64_t n = T / cp;
  double total = 0;
  for (size_t d = 0; d + 1 < begins.size(); ++d) total += run_area({begins[d], begins[d + 1] - begins[d], 0});
  const double bound = std::max(1.0, piece_share * total / cp);  // a piece's most area
  // 1. The pieces.
  std::vector<Piece> pieces;
  for (size_t d = 0; d + 1 < begins.size(); ++d) {
    const int64_t b = begins[d], L = begins[d + 1] - b;
    const double area = run_area({b, L, 0});
    int64_t k = 1;
    while (k < L / 2 && (area / double(k) > bound || (L + k - 1) / k > n)) ++k;
    if (k == 1 && L <= n && area <= bound) {
      pieces.push_back({{{b, L, 0}}, area, L});
      continue;
    }
    const int64_t chunks = std::min<int64_t>(2 * k, L);
    auto chunk = [&](int64_t i) {  // chunk i of `chunks` near-equal chunks
      const int64_t lo = L * i / chunks, hi = L * (i + 1) / chunks;
      return Run{b + lo, hi - lo, lo};
    };
    for (int64_t i = 0; i < chunks / 2; ++i) {
      Piece p;
      p.runs = {chunk(i), chunk(chunks - 1 - i)};
      for (const Run& r : p.runs) p.area += run_area(r), p.tokens += r.len;
      pieces.push_back(std::move(p));
    }
    if (chunks % 2) {
      const Run mid = chunk(chunks / 2);
      pieces.push_back({{mid}, run_area(mid), mid.len});
    }
  }
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.area > b.area; });
  // 2.-3. Largest area first onto the least-loaded rank with room; poured when none has room.
  std::vector<double> area(static_cast<size_t>(cp), 0.0);  // (cp) mask area per rank
  std::vector<int64_t> room(static_cast<size_t>(cp), n);   // (cp) free tokens per rank
  std::vector<int> owner(static_cast<size_t>(T), -1);      // (T) rank of each position
  auto place = [&](const Run& r, int rank) {
    for (int64_t p = r.begin; p < r.begin + r.len; ++p) owner[size_t(p)] = rank;
    area[size_t(rank)] += run_area(r);
    room[size_t(rank)] -= r.len;
  };
  for (const Piece& piece : pieces) {
    int best = -1;
    for (int r = 0; r < cp; ++r)
      if (room[size_t(r)] >= piece.tokens && (best < 0 || area[size_t(r)] < area[size_t(best)])) best = r;
    if (best >= 0) {
      for (const Run& run : piece.runs) place(run, best);
      continue;
    }
    for (const Run& whole : piece.runs) {  // poured: consecutive parts, each onto the rank with the most room
      Run left = whole;
      while (left.len > 0) {
        int r = -1;
        for (int s = 0; s < cp; ++s)
          if (room[size_t(s)] > 0 && (r < 0 || room[size_t(s)] > room[size_t(r)])) r = s;
        RT_CHECK(r >= 0, "gather_pack: no room left for position " << left.begin << " (internal error)");
        const int64_t take = std::min(left.len, room[size_t(r)]);
        place({left.begin, take, left.offset}, r);
        left.begin += take, left.offset += take, left.len -= take;
      }
    }
  }
  std::vector<RingSpan> spans;
  for (int64_t p = 0; p < T; ++p) {
    if (spans.empty() || spans.back().rank != owner[size_t(p)]) spans.push_back({p, 0, owner[size_t(p)]});
    ++spans.back().len;
  }
  return spans;
}

}  // namespace rt
