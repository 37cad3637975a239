// doc_work_list (parallel/schedule/doc_work_list.h) against brute force: for every 128-row query tile exactly the key
// tiles holding a visible pair, as maximal ascending segments of one source (own -1, gathered 0), tasks heaviest
// first; over documents of length 1, one document across everything, random odd lengths, B = 2, two sources with a
// gap, tiles holding several documents, own rows out of position order and one source. doc_work_list_problem must
// pass the built list and catch a dropped task, a duplicated segment, a query tile listed twice and a listed tile
// without a visible pair. And the device words round trip (kernels/attn_work_list.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include "parallel/schedule/doc_work_list.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"

namespace rt {
namespace {

float no_round(float x) { return x; }
DocWorkListInputs inputs_of(const test::TwoKvCase& c) { return test::work_list_inputs_of(c); }

// The same queries against their own keys only: one source (list_rows = Nk).
DocWorkListInputs one_source(const test::TwoKvCase& c) {
  DocWorkListInputs in = inputs_of(c);
  in.list_rows = c.n;
  in.k_pos.clear();
  for (int64_t b = 0; b < c.B; ++b)
    in.k_pos.insert(in.k_pos.end(), c.k_pos.begin() + b * c.list, c.k_pos.begin() + b * c.list + c.n);
  return in;
}

// Brute force: (b, q_row) -> the ascending key tiles holding a pair visible to one of its rows.
std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> visible_tiles(const DocWorkListInputs& in) {
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> out;
  const int64_t s2 = attn_second_kv_row(in.Nk);
  for (int64_t b = 0; b < in.B; ++b)
    for (int64_t i0 = 0; i0 < in.Nq; i0 += 128) {
      std::vector<int64_t> tiles;
      for (int64_t j = 0; j < in.list_rows; ++j) {
        if (j >= in.Nk && j < s2) continue;  // the gap holds no key
        const int64_t kp = in.k_pos[size_t(b * in.list_rows + j)];
        bool seen = false;
        for (int64_t i = i0; i < std::min(in.Nq, i0 + 128) && !seen; ++i)
          seen = in.q_doc_start[size_t(b * in.Nq + i)] <= kp && kp <= in.q_pos[size_t(b * in.Nq + i)];
        if (seen && (tiles.empty() || tiles.back() != j / 128)) tiles.push_back(j / 128);
      }
      if (!tiles.empty()) out[{b, i0}] = tiles;
    }
  return out;
}

// Checks a built list against brute force, its segments' merging and sources, and its order.
void expect_exact(const DocWorkListInputs& in, const char* what) {
  SCOPED_TRACE(what);
  const AttnWorkList list = doc_work_list(in);
  EXPECT_EQ(doc_work_list_problem(list, in), "");
  const auto truth = visible_tiles(in);
  ASSERT_EQ(list.tasks.size(), truth.size()) << "one task per query tile that sees a key";
  const int64_t own_tiles = attn_second_kv_row(in.Nk) / 128;
  int64_t total = 0;
  for (size_t n = 0; n < list.tasks.size(); ++n) {
    const AttnWorkTask& t = list.tasks[n];
    EXPECT_EQ(t.part, 0);
    EXPECT_EQ(t.parts, 1);
    EXPECT_EQ(t.merge_slot, -1);
    std::vector<int64_t> tiles;
    for (int s = t.first_seg; s < t.first_seg + t.segs; ++s) {
      const AttnKeySeg& seg = list.segs[size_t(s)];
      EXPECT_EQ(seg.source, seg.first_tile < own_tiles ? -1 : 0) << "segment " << s;
      if (s > t.first_seg) {  // maximal: the previous segment cannot be extended into this one
        const AttnKeySeg& p = list.segs[size_t(s - 1)];
        EXPECT_TRUE(p.first_tile + p.tiles < seg.first_tile || p.source != seg.source) << "segment " << s;
      }
      for (int k = 0; k < seg.tiles; ++k) tiles.push_back(seg.first_tile + k);
    }
    const auto it = truth.find({t.sample, t.q_row});
    ASSERT_TRUE(it != truth.end()) << "task " << n << " lists a query tile that sees nothing";
    EXPECT_EQ(tiles, it->second) << "sample " << t.sample << ", q_row " << t.q_row;
    total += int64_t(tiles.size());
    if (n > 0) {  // heaviest first, then sample, then q_row
      const AttnWorkTask& p = list.tasks[n - 1];
      const int64_t pt = [&] {
        int64_t k = 0;
        for (int s = p.first_seg; s < p.first_seg + p.segs; ++s) k += list.segs[size_t(s)].tiles;
        return k;
      }();
      EXPECT_TRUE(pt > int64_t(tiles.size()) ||
                  (pt == int64_t(tiles.size()) && std::make_pair(p.sample, p.q_row) < std::make_pair(t.sample, t.q_row)))
          << "task " << n << " out of order";
    }
  }
  EXPECT_EQ(list.key_tiles(), total);
}

TEST(DocWorkList, EqualsBruteForce) {
  // Random odd lengths (some of 1), B = 2, two sources with a gap (n = 230 + 190 = 420, gap to 512).
  expect_exact(inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round)), "odd, B=2");
  // Short documents: every tile holds several.
  {
    std::mt19937_64 rng(5);
    std::vector<int64_t> lens;
    for (int64_t p = 0; p < 2000; p += lens.back()) lens.push_back(1 + int64_t(rng() % 23));
    expect_exact(inputs_of(test::make_two_kv_case(2, 1, 1, 1, 2000, 100, 611, 1300, 1517, 3, no_round, lens)),
                 "short documents");
  }
  // Documents of length 1: a query sees only its own key; unseen gathered rows (1 in 2) must not be listed.
  expect_exact(inputs_of(test::make_two_kv_case(1, 1, 1, 1, 900, 0, 300, 500, 640, 8, no_round,
                                                std::vector<int64_t>(900, 1), 2)),
               "length 1");
  // One document across everything: every query tile meets every key tile up to its last position.
  expect_exact(inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1500, 200, 455, 1000, 1129, 9, no_round, {1500})),
               "one document");
  // One source (no gathered tiles), odd lengths.
  expect_exact(one_source(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round)),
               "one source");
}

TEST(DocWorkList, OwnRowsOutOfPositionOrder) {
  // The rank's chunks in the other order, then its rows shuffled: runs are rows of one document start that lie
  // together, whatever their order, and key tiles are tested by their sorted positions.
  const test::TwoKvCase c = test::make_two_kv_case(1, 1, 1, 1, 1200, 100, 300, 700, 1000, 17, no_round);
  expect_exact(test::shuffled_own_rows(c, 3), "shuffled own rows");
}

TEST(DocWorkList, RandomSmallCasesEqualBruteForce) {
  // Many small random calls: short documents, the rank's rows a random subset of positions in random order (its own
  // keys), gathered rows a random subset of the others (sorted or not), so that key tiles often touch a run's first or
  // last visible position exactly.
  std::mt19937_64 rng(2024);
  for (int c = 0; c < 300; ++c) {
    const DocWorkListInputs in = test::random_work_list_inputs(rng);
    const std::string what = "random case " + std::to_string(c);
    expect_exact(in, what.c_str());
    if (HasFailure()) return;
  }
}

TEST(DocWorkList, ProblemCatchesBrokenLists) {
  const DocWorkListInputs in =
      inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round));
  const AttnWorkList good = doc_work_list(in);
  ASSERT_EQ(doc_work_list_problem(good, in), "");
  ASSERT_GE(good.tasks.size(), 2u);

  AttnWorkList dropped = good;  // a task dropped: its visible pairs are covered 0 times
  dropped.tasks.erase(dropped.tasks.begin());
  EXPECT_NE(doc_work_list_problem(dropped, in).find("no segment"), std::string::npos)
      << doc_work_list_problem(dropped, in);

  AttnWorkList fewer = good;  // the first task's last segment dropped
  fewer.tasks[0].segs = int16_t(fewer.tasks[0].segs - 1);
  if (fewer.tasks[0].segs == 0) fewer.tasks[0].segs = 1, --fewer.segs[size_t(fewer.tasks[0].first_seg)].tiles;
  EXPECT_NE(doc_work_list_problem(fewer, in), "");

  AttnWorkList duplicated = good;  // the first task's first segment twice: covered twice
  {
    const AttnWorkTask t = duplicated.tasks[0];
    duplicated.segs.push_back(duplicated.segs[size_t(t.first_seg)]);
    for (int s = t.first_seg; s < t.first_seg + t.segs; ++s) duplicated.segs.push_back(duplicated.segs[size_t(s)]);
    duplicated.tasks[0].first_seg = int32_t(good.segs.size());
    duplicated.tasks[0].segs = int16_t(t.segs + 1);
  }
  EXPECT_NE(doc_work_list_problem(duplicated, in).find("out of range, out of order"), std::string::npos)
      << doc_work_list_problem(duplicated, in);

  AttnWorkList twice = good;  // a query tile in two tasks
  twice.tasks.push_back(twice.tasks[0]);
  EXPECT_NE(doc_work_list_problem(twice, in).find("both hold"), std::string::npos);

  AttnWorkList split = good;  // a part with no merge slot and no other part (test_doc_work_list_split.cpp: splits)
  split.tasks[0].parts = 2;
  EXPECT_NE(doc_work_list_problem(split, in), "");

  // A listed tile without a visible pair: length-1 documents see only their own tile.
  const DocWorkListInputs ones = inputs_of(
      test::make_two_kv_case(1, 1, 1, 1, 900, 0, 300, 500, 640, 8, no_round, std::vector<int64_t>(900, 1), 2));
  AttnWorkList loose = doc_work_list(ones);
  ASSERT_EQ(doc_work_list_problem(loose, ones), "");
  AttnKeySeg& first = loose.segs[size_t(loose.tasks[0].first_seg)];
  if (first.first_tile > 0) --first.first_tile, ++first.tiles;
  else ++first.tiles;
  EXPECT_NE(doc_work_list_problem(loose, ones).find("holds no key visible"), std::string::npos)
      << doc_work_list_problem(loose, ones);
}

TEST(DocWorkList, WordsRoundTrip) {
  const DocWorkListInputs in =
      inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round));
  const AttnWorkList list = doc_work_list(in);
  const std::vector<int32_t> words = attn_work_list_words(list);
  const size_t T = list.tasks.size(), S = list.segs.size(), K = list.keys.size();
  ASSERT_EQ(list.rows.size(), 8 * T);
  ASSERT_EQ(K, size_t(in.B * ((in.list_rows + 127) / 128))) << "B x key tiles";
  ASSERT_EQ(words.size(), 4 + 36 * T + 4 * K + 2 * S);
  EXPECT_EQ(words[0], int32_t(T));
  EXPECT_EQ(words[1], int32_t(S));
  EXPECT_EQ(words[2], kAttnFwdWorkListTag);
  EXPECT_EQ(words[3], int32_t(K));
  EXPECT_EQ(words[4], list.tasks[0].q_row);      // a task's first word is its q_row
  EXPECT_EQ(words[6], list.tasks[0].first_seg);  // its third the first segment
  int64_t pos_lo = 0, key_lo = 0;                // the first row group's least position, the first key tile's least
  std::memcpy(&pos_lo, words.data() + 4 + 4 * T, 8);
  std::memcpy(&key_lo, words.data() + 4 + 36 * T, 8);
  EXPECT_EQ(pos_lo, list.rows[0].pos_lo);
  EXPECT_EQ(key_lo, list.keys[0].lo);
  EXPECT_EQ(words[4 + 36 * T + 4 * K], list.segs[0].first_tile);
  const AttnWorkList back = attn_work_list_from_words(words.data(), int64_t(words.size()));
  ASSERT_EQ(back.tasks.size(), T);
  ASSERT_EQ(back.segs.size(), S);
  ASSERT_EQ(back.rows.size(), 8 * T);
  ASSERT_EQ(back.keys.size(), K);
  EXPECT_EQ(std::memcmp(back.tasks.data(), list.tasks.data(), T * sizeof(AttnWorkTask)), 0);
  EXPECT_EQ(std::memcmp(back.segs.data(), list.segs.data(), S * sizeof(AttnKeySeg)), 0);
  EXPECT_EQ(std::memcmp(back.rows.data(), list.rows.data(), 8 * T * sizeof(AttnRowBounds)), 0);
  EXPECT_EQ(std::memcmp(back.keys.data(), list.keys.data(), K * sizeof(AttnKeyRange)), 0);
  EXPECT_EQ(back.key_tiles(), list.key_tiles());
  EXPECT_THROW(attn_work_list_from_words(words.data(), int64_t(words.size()) - 1), Error);
  const std::vector<int32_t> empty = attn_work_list_words(AttnWorkList{});
  EXPECT_EQ(empty, (std::vector<int32_t>{0, 0, kAttnFwdWorkListTag, 0}));
  AttnWorkList no_bounds = list;  // words need the bounds (doc_work_list_bounds)
  no_bounds.rows.clear();
  EXPECT_THROW(attn_work_list_words(no_bounds), Error);
}

// The row bounds and key ranges: what the kernel's tile test reads. Each recomputed from the rows here, and the
// checker must catch one that is off by one position (a range that would call a partly visible tile wholly visible,
// or the reverse).
TEST(DocWorkList, BoundsEqualTheRowsAndTheCheckerCatchesAWrongOne) {
  for (const bool one : {false, true}) {
    SCOPED_TRACE(one ? "one source" : "two sources");
    const test::TwoKvCase c = test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round);
    const DocWorkListInputs in = one ? one_source(c) : inputs_of(c);
    const AttnWorkList good = doc_work_list(in);
    ASSERT_EQ(doc_work_list_problem(good, in), "");
    const int64_t tiles = (in.list_rows + 127) / 128;
    ASSERT_EQ(good.keys.size(), size_t(in.B * tiles));
    for (int64_t b = 0; b < in.B; ++b)
      for (int64_t t = 0; t < tiles; ++t) {
        int64_t lo = INT64_MAX, hi = INT64_MIN;  // rows past the list read its last row; the gap's count
        for (int64_t j = t * 128; j < t * 128 + 128; ++j) {
          lo = std::min(lo, in.k_pos[size_t(b * in.list_rows + std::min(j, in.list_rows - 1))]);
          hi = std::max(hi, in.k_pos[size_t(b * in.list_rows + std::min(j, in.list_rows - 1))]);
        }
        EXPECT_EQ(good.keys[size_t(b * tiles + t)].lo, lo) << "sample " << b << ", tile " << t;
        EXPECT_EQ(good.keys[size_t(b * tiles + t)].hi, hi) << "sample " << b << ", tile " << t;
      }
    for (size_t n = 0; n < good.tasks.size(); ++n)
      for (int64_t g = 0; g < 8; ++g) {
        const AttnWorkTask& task = good.tasks[n];
        int64_t pos_lo = INT64_MAX, doc_hi = INT64_MIN;
        for (int64_t i = task.q_row + 16 * g; i < task.q_row + 16 * g + 16; ++i) {
          const size_t row = size_t(task.sample * in.Nq + std::min(i, in.Nq - 1));
          pos_lo = std::min(pos_lo, in.q_pos[row]);
          doc_hi = std::max(doc_hi, in.q_doc_start[row]);
        }
        EXPECT_EQ(good.rows[n * 8 + size_t(g)].pos_lo, pos_lo) << "task " << n << ", group " << g;
        EXPECT_EQ(good.rows[n * 8 + size_t(g)].doc_hi, doc_hi) << "task " << n << ", group " << g;
      }
    AttnWorkList narrow = good;  // a key range one position short of its tile's greatest key
    narrow.keys[narrow.keys.size() / 2].hi -= 1;
    EXPECT_NE(doc_work_list_problem(narrow, in).find("has the range"), std::string::npos)
        << doc_work_list_problem(narrow, in);
    AttnWorkList wide = good;  // one reaching a position below its least key
    wide.keys[0].lo -= 1;
    EXPECT_NE(doc_work_list_problem(wide, in).find("has the range"), std::string::npos);
    AttnWorkList rows = good;  // a row group's least position one too high
    rows.rows[rows.rows.size() - 1].pos_lo += 1;
    EXPECT_NE(doc_work_list_problem(rows, in).find("row group"), std::string::npos) << doc_work_list_problem(rows, in);
    AttnWorkList docs = good;  // a row group's greatest document start one too low
    docs.rows[3].doc_hi -= 1;
    EXPECT_NE(doc_work_list_problem(docs, in).find("row group"), std::string::npos);
    AttnWorkList missing = good;  // no bounds at all
    missing.keys.clear();
    EXPECT_NE(doc_work_list_problem(missing, in).find("doc_work_list_bounds"), std::string::npos);
    AttnWorkList refilled = narrow;  // doc_work_list_bounds restores them
    doc_work_list_bounds(refilled, in);
    EXPECT_EQ(doc_work_list_problem(refilled, in), "");
  }
}

TEST(DocWorkList, RefusesBadInputs) {
  DocWorkListInputs in = inputs_of(test::make_two_kv_case(1, 1, 1, 1, 600, 0, 200, 300, 350, 2, no_round));
  DocWorkListInputs in_gap = in;
  in_gap.list_rows = in.Nk + 1;  // inside the gap: neither one source nor past it
  EXPECT_THROW(doc_work_list(in_gap), Error);
  DocWorkListInputs in_short = in;
  in_short.k_pos.pop_back();
  EXPECT_THROW(doc_work_list(in_short), Error);
}

}  // namespace
}  // namespace rt
