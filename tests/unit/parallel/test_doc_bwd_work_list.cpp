// doc_bwd_work_list (parallel/schedule/doc_work_list.h), the backward's key-tile-major list, against brute force: for
// every 128-row key tile exactly the query tiles holding a row that sees one of its keys, as maximal ascending segments
// carrying the key tile's source; one task per key tile (none seen: no segment); own tiles with segments heaviest
// first, then gathered ones, then (optionally) the own call's part B, then the empty tasks. Over documents of length 1,
// one document across everything, random odd lengths, B = 2, two sources with a gap, own rows out of position order,
// one source, and 300 random small calls. It is the forward's list transposed (the same pairs).
// doc_bwd_work_list_problem must pass the built list and catch a dropped or duplicated query segment, a dropped task, a
// key tile listed twice, a listed query tile without a visible pair and a wrong source. The backward words round trip
// and never read as a forward list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include "parallel/schedule/doc_work_list.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"

namespace rt {
namespace {

float no_round(float x) { return x; }
DocWorkListInputs inputs_of(const test::TwoKvCase& c) { return test::work_list_inputs_of(c); }

// The call's key tiles: own [0, s2 / 128), gathered [s2 / 128, ceil(list_rows / 128)) (one source: own only).
int64_t own_tiles_of(const DocWorkListInputs& in) { return attn_second_kv_row(in.Nk) / 128; }
int64_t list_tiles_of(const DocWorkListInputs& in) {
  return in.list_rows == in.Nk ? own_tiles_of(in) : (in.list_rows + 127) / 128;
}

// Brute force: (b, key tile) -> the ascending query tiles holding a row that sees one of the tile's keys.
std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>> seeing_tiles(const DocWorkListInputs& in) {
  std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>> out;
  const int64_t own_tiles = own_tiles_of(in), list_tiles = list_tiles_of(in);
  for (int64_t b = 0; b < in.B; ++b)
    for (int64_t t = 0; t < list_tiles; ++t) {
      const int64_t j1 = std::min(t * 128 + 128, t < own_tiles ? in.Nk : in.list_rows);
      std::vector<int32_t>& qts = out[{b, t}];
      for (int64_t i0 = 0; i0 < in.Nq; i0 += 128) {
        bool seen = false;
        for (int64_t j = t * 128; j < j1 && !seen; ++j) {
          const int64_t kp = in.k_pos[size_t(b * in.list_rows + j)];
          for (int64_t i = i0; i < std::min(in.Nq, i0 + 128) && !seen; ++i)
            seen = in.q_doc_start[size_t(b * in.Nq + i)] <= kp && kp <= in.q_pos[size_t(b * in.Nq + i)];
        }
        if (seen) qts.push_back(int32_t(i0 / 128));
      }
    }
  return out;
}

int64_t tiles_of(const AttnBwdWorkList& list, const AttnBwdTask& t) {
  int64_t n = 0;
  for (int s = t.first_seg; s < t.first_seg + t.segs; ++s) n += list.segs[size_t(s)].tiles;
  return n;
}

// Checks a built backward list against brute force, its segments' merging and sources, its order, and that it holds
// the forward list's pairs.
// own_b_row >= 0: the own tiles from that row on are part B, after the gathered ones.
void expect_exact(const DocWorkListInputs& in, const char* what, int64_t own_b_row = -1) {
  SCOPED_TRACE(what);
  const AttnBwdWorkList list = doc_bwd_work_list(in, own_b_row);
  EXPECT_EQ(doc_bwd_work_list_problem(list, in), "");
  const auto truth = seeing_tiles(in);
  ASSERT_EQ(int64_t(list.tasks.size()), in.B * list_tiles_of(in)) << "one task per key tile";
  const int64_t own_tiles = own_tiles_of(in);
  std::set<std::tuple<int64_t, int64_t, int64_t>> pairs;  // (b, query tile, key tile)
  auto cls = [&](const AttnBwdTask& t) {
    if (t.segs == 0) return 3;
    if (t.k_row / 128 >= own_tiles) return 1;
    return own_b_row >= 0 && t.k_row >= own_b_row ? 2 : 0;
  };
  for (size_t n = 0; n < list.tasks.size(); ++n) {
    const AttnBwdTask& t = list.tasks[n];
    EXPECT_EQ(t.part, 0);
    EXPECT_EQ(t.parts, 1);
    EXPECT_EQ(t.merge_slot, -1);
    std::vector<int32_t> qts;
    for (int s = t.first_seg; s < t.first_seg + t.segs; ++s) {
      const AttnQuerySeg& seg = list.segs[size_t(s)];
      EXPECT_EQ(seg.source, t.k_row / 128 < own_tiles ? -1 : 0) << "segment " << s;
      EXPECT_EQ(seg.spare, 0);
      if (s > t.first_seg) {  // maximal and ascending: the previous segment ends before a gap
        const AttnQuerySeg& p = list.segs[size_t(s - 1)];
        EXPECT_LT(p.first_tile + p.tiles, seg.first_tile) << "segment " << s;
      }
      for (int k = 0; k < seg.tiles; ++k) {
        qts.push_back(seg.first_tile + k);
        pairs.insert({t.sample, seg.first_tile + k, t.k_row / 128});
      }
    }
    const auto it = truth.find({t.sample, t.k_row / 128});
    ASSERT_TRUE(it != truth.end()) << "task " << n << " names a key tile outside the call";
    EXPECT_EQ(qts, it->second) << "sample " << t.sample << ", k_row " << t.k_row;
    if (n > 0) {  // own (A), gathered, own part B, empty; heaviest first; then sample, then k_row
      const AttnBwdTask& p = list.tasks[n - 1];
      const auto key = [&](const AttnBwdTask& x) {
        return std::make_tuple(cls(x), -tiles_of(list, x), int64_t(x.sample), int64_t(x.k_row));
      };
      EXPECT_LT(key(p), key(t)) << "task " << n << " out of order";
    }
  }
  // The transpose of the forward list: the same (query tile, key tile) pairs.
  const AttnWorkList fwd = doc_work_list(in);
  std::set<std::tuple<int64_t, int64_t, int64_t>> fwd_pairs;
  for (const AttnWorkTask& t : fwd.tasks)
    for (int s = t.first_seg; s < t.first_seg + t.segs; ++s)
      for (int k = 0; k < fwd.segs[size_t(s)].tiles; ++k)
        fwd_pairs.insert({t.sample, t.q_row / 128, fwd.segs[size_t(s)].first_tile + k});
  EXPECT_EQ(pairs, fwd_pairs);
  EXPECT_EQ(list.query_tiles(), fwd.key_tiles());
}

TEST(DocBwdWorkList, EqualsBruteForce) {
  // Random odd lengths (some of 1), B = 2, two sources with a gap (n = 230 + 190 = 420, gap to 512).
  expect_exact(inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round)), "odd, B=2");
  {  // Short documents: every tile holds several.
    std::mt19937_64 rng(5);
    std::vector<int64_t> lens;
    for (int64_t p = 0; p < 2000; p += lens.back()) lens.push_back(1 + int64_t(rng() % 23));
    expect_exact(inputs_of(test::make_two_kv_case(2, 1, 1, 1, 2000, 100, 611, 1300, 1517, 3, no_round, lens)),
                 "short documents");
  }
  // Documents of length 1: a key tile is seen only by its own query tile; gathered rows nobody sees get empty tasks.
  expect_exact(inputs_of(test::make_two_kv_case(1, 1, 1, 1, 900, 0, 300, 500, 640, 8, no_round,
                                                std::vector<int64_t>(900, 1), 2)),
               "length 1");
  // One document across everything.
  expect_exact(inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1500, 200, 455, 1000, 1129, 9, no_round, {1500})),
               "one document");
  {  // Source 2 ending in whole key tiles no query sees: their tasks have no segment and come last.
    test::TwoKvCase c = test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 73, no_round);
    test::pad_second_source(c, 300, 7, no_round);
    const DocWorkListInputs in = inputs_of(c);
    expect_exact(in, "padded second source");
    const AttnBwdWorkList list = doc_bwd_work_list(in);
    ASSERT_GE(list.tasks.size(), 2u);
    EXPECT_EQ(list.tasks.back().segs, 0);
    EXPECT_GE(list.tasks.back().k_row, attn_second_kv_row(in.Nk));
  }
  {  // One source (no gathered tiles), odd lengths.
    const test::TwoKvCase c = test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round);
    DocWorkListInputs in = inputs_of(c);
    in.list_rows = c.n;  // own keys only; the positions keep the case's stride
    in.k_stride = c.list;
    DocWorkListInputs packed = in;  // the brute force above reads k_pos at stride list_rows
    packed.k_stride = 0;
    packed.k_pos.clear();
    for (int64_t b = 0; b < c.B; ++b)
      packed.k_pos.insert(packed.k_pos.end(), c.k_pos.begin() + b * c.list, c.k_pos.begin() + b * c.list + c.n);
    expect_exact(packed, "one source");
    // The strided form gives the same list.
    const auto a = attn_work_list_words(doc_bwd_work_list(in)), p = attn_work_list_words(doc_bwd_work_list(packed));
    EXPECT_EQ(a, p);
  }
}

TEST(DocBwdWorkList, OwnRowsOutOfPositionOrder) {
  const test::TwoKvCase c = test::make_two_kv_case(1, 1, 1, 1, 1200, 100, 300, 700, 1000, 17, no_round);
  expect_exact(test::shuffled_own_rows(c, 3), "shuffled own rows");
}

TEST(DocBwdWorkList, RandomSmallCasesEqualBruteForce) {
  // As the forward's: short documents, the rank's rows a random subset of positions in random order, gathered rows a
  // random subset of the others (sorted or not), one source in a third of the calls.
  std::mt19937_64 rng(4049);
  for (int c = 0; c < 300; ++c) {
    const DocWorkListInputs in = test::random_work_list_inputs(rng);
    const std::string what = "random case " + std::to_string(c);
    // Every other call with a part B from a random own tile on.
    const int64_t own_b_row = c % 2 ? -1 : 128 * int64_t(rng() % uint64_t(attn_second_kv_row(in.Nk) / 128 + 1));
    expect_exact(in, what.c_str(), own_b_row);
    if (HasFailure()) return;
  }
}

TEST(DocBwdWorkList, OwnPartBComesAfterTheGatheredTiles) {
  // n = 420 own rows (4 own tiles): part B from row 256 (tiles 2 and 3) after every gathered tile with segments.
  const DocWorkListInputs in =
      inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round));
  expect_exact(in, "part B from row 256", 256);
  expect_exact(in, "part B the whole own call", 0);
  expect_exact(in, "part B empty", attn_second_kv_row(in.Nk));
  const AttnBwdWorkList a = doc_bwd_work_list(in), b = doc_bwd_work_list(in, 256);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  EXPECT_EQ(a.query_tiles(), b.query_tiles());
  bool gathered_seen = false, b_after = false;
  for (const AttnBwdTask& t : b.tasks) {
    gathered_seen |= t.k_row >= attn_second_kv_row(in.Nk) && t.segs > 0;
    b_after |= gathered_seen && t.k_row >= 256 && t.k_row < attn_second_kv_row(in.Nk);
  }
  EXPECT_TRUE(b_after) << "no part B task after a gathered one";
  EXPECT_THROW(doc_bwd_work_list(in, 100), Error) << "not a multiple of 128";
  EXPECT_THROW(doc_bwd_work_list(in, attn_second_kv_row(in.Nk) + 128), Error) << "past the own tiles";
}

// A task with at least `segs` segments, or -1.
int task_with_segments(const AttnBwdWorkList& list, int segs) {
  for (size_t n = 0; n < list.tasks.size(); ++n)
    if (list.tasks[n].segs >= segs) return int(n);
  return -1;
}

// Two samples of 3 query tiles (one source): rows [0, 128) and [256, 384) hold one document's positions [0, 256), rows
// [128, 256) length-1 documents at positions [1000, 1128): key tile 0 is seen by query tiles 0 and 2, not 1 (two
// segments). Sample 1 is sample 0 with the last two tiles swapped.
DocWorkListInputs gapped_case() {
  DocWorkListInputs in;
  in.B = 2, in.Nq = in.Nk = in.list_rows = 384;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 384; ++i) {
      const int64_t tile = b == 1 && i >= 128 ? 3 - i / 128 : i / 128, r = i % 128;
      const int64_t pos = tile == 0 ? r : tile == 1 ? 1000 + r : 128 + r;
      in.q_pos.push_back(pos);
      in.q_doc_start.push_back(tile == 1 ? pos : 0);
      in.k_pos.push_back(pos);
    }
  return in;
}

TEST(DocBwdWorkList, ProblemCatchesBrokenLists) {
  const DocWorkListInputs in = gapped_case();
  expect_exact(in, "gapped");
  const AttnBwdWorkList good = doc_bwd_work_list(in);
  ASSERT_EQ(doc_bwd_work_list_problem(good, in), "");
  const int multi = task_with_segments(good, 2);
  ASSERT_GE(multi, 0) << "the case must have a key tile seen by query tiles that are not consecutive";

  AttnBwdWorkList dropped = good;  // a query segment dropped: its pairs are not listed
  dropped.tasks[size_t(multi)].segs = int16_t(dropped.tasks[size_t(multi)].segs - 1);
  EXPECT_NE(doc_bwd_work_list_problem(dropped, in).find("do not list query tile"), std::string::npos)
      << doc_bwd_work_list_problem(dropped, in);

  AttnBwdWorkList duplicated = good;  // the task's first segment twice (appended copy of its segments)
  {
    const AttnBwdTask t = duplicated.tasks[size_t(multi)];
    duplicated.segs.push_back(duplicated.segs[size_t(t.first_seg)]);
    for (int s = t.first_seg; s < t.first_seg + t.segs; ++s) duplicated.segs.push_back(duplicated.segs[size_t(s)]);
    duplicated.tasks[size_t(multi)].first_seg = int32_t(good.segs.size());
    duplicated.tasks[size_t(multi)].segs = int16_t(t.segs + 1);
  }
  EXPECT_NE(doc_bwd_work_list_problem(duplicated, in).find("repeats query tiles"), std::string::npos)
      << doc_bwd_work_list_problem(duplicated, in);

  AttnBwdWorkList no_task = good;  // a key tile's task dropped: its dK / dV would not be written
  no_task.tasks.erase(no_task.tasks.begin());
  EXPECT_NE(doc_bwd_work_list_problem(no_task, in).find("has no task"), std::string::npos)
      << doc_bwd_work_list_problem(no_task, in);

  AttnBwdWorkList twice = good;  // a key tile in two tasks
  twice.tasks.push_back(twice.tasks[0]);
  EXPECT_NE(doc_bwd_work_list_problem(twice, in).find("both hold"), std::string::npos);

  AttnBwdWorkList wrong_source = good;  // an own tile's segment marked gathered
  wrong_source.segs[size_t(good.tasks[0].first_seg)].source = 0;
  ASSERT_LT(good.tasks[0].k_row, attn_second_kv_row(in.Nk));
  EXPECT_NE(doc_bwd_work_list_problem(wrong_source, in).find("wrong source"), std::string::npos);

  AttnBwdWorkList split = good;  // splits are not valid yet
  split.tasks[0].parts = 2;
  EXPECT_NE(doc_bwd_work_list_problem(split, in), "");

  // A listed query tile without a visible pair: with length-1 documents key tile t is seen by query tile t only.
  const DocWorkListInputs ones = inputs_of(
      test::make_two_kv_case(1, 1, 1, 1, 900, 0, 300, 500, 640, 8, no_round, std::vector<int64_t>(900, 1), 2));
  AttnBwdWorkList loose = doc_bwd_work_list(ones);
  ASSERT_EQ(doc_bwd_work_list_problem(loose, ones), "");
  AttnQuerySeg& first = loose.segs[size_t(loose.tasks[0].first_seg)];
  if (first.first_tile > 0) --first.first_tile, ++first.tiles;
  else ++first.tiles;
  EXPECT_NE(doc_bwd_work_list_problem(loose, ones).find("none of its rows sees"), std::string::npos)
      << doc_bwd_work_list_problem(loose, ones);
}

TEST(DocBwdWorkList, MirrorRefusesBrokenForwardLists) {
  const DocWorkListInputs in =
      inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round));
  const AttnWorkList fwd = doc_work_list(in);
  EXPECT_NO_THROW(doc_bwd_work_list_mirror(fwd, in));
  AttnWorkList twice = fwd;  // a query tile in two tasks: its pairs twice
  twice.tasks.push_back(twice.tasks[0]);
  EXPECT_THROW(doc_bwd_work_list_mirror(twice, in), Error);
  AttnWorkList outside = fwd;  // a segment past the key list
  outside.segs[0].tiles = 1000;
  EXPECT_THROW(doc_bwd_work_list_mirror(outside, in), Error);
  AttnWorkList wrong = fwd;  // an own tile under source 0
  for (AttnKeySeg& s : wrong.segs)
    if (s.source == -1) {
      s.source = 0;
      break;
    }
  EXPECT_THROW(doc_bwd_work_list_mirror(wrong, in), Error);
}

TEST(DocBwdWorkList, WordsRoundTripAndKindsDoNotMix) {
  const DocWorkListInputs in =
      inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round));
  const AttnBwdWorkList list = doc_bwd_work_list(in);
  const std::vector<int32_t> words = attn_work_list_words(list);
  const size_t T = list.tasks.size(), S = list.segs.size();
  ASSERT_EQ(words.size(), 4 + 4 * T + 2 * S);
  EXPECT_EQ(words[0], int32_t(T));
  EXPECT_EQ(words[1], int32_t(S));
  EXPECT_EQ(words[2], kAttnBwdWorkListTag);
  EXPECT_EQ(words[3], 0);
  EXPECT_EQ(words[4], list.tasks[0].k_row);      // a task's first word is its k_row
  EXPECT_EQ(words[6], list.tasks[0].first_seg);  // its third the first segment
  EXPECT_EQ(words[4 + 4 * T], list.segs[0].first_tile);
  EXPECT_EQ(attn_work_list_kind(words.data(), int64_t(words.size())), AttnWorkListKind::backward);
  const AttnBwdWorkList back = attn_bwd_work_list_from_words(words.data(), int64_t(words.size()));
  ASSERT_EQ(back.tasks.size(), T);
  ASSERT_EQ(back.segs.size(), S);
  EXPECT_EQ(std::memcmp(back.tasks.data(), list.tasks.data(), T * sizeof(AttnBwdTask)), 0);
  EXPECT_EQ(std::memcmp(back.segs.data(), list.segs.data(), S * sizeof(AttnQuerySeg)), 0);
  EXPECT_EQ(back.query_tiles(), list.query_tiles());
  EXPECT_THROW(attn_bwd_work_list_from_words(words.data(), int64_t(words.size()) - 1), Error);
  EXPECT_THROW(attn_work_list_from_words(words.data(), int64_t(words.size())), Error) << "a backward list as forward";
  const std::vector<int32_t> fwd = attn_work_list_words(doc_work_list(in));
  EXPECT_EQ(attn_work_list_kind(fwd.data(), int64_t(fwd.size())), AttnWorkListKind::forward);
  EXPECT_THROW(attn_bwd_work_list_from_words(fwd.data(), int64_t(fwd.size())), Error) << "a forward list as backward";
  EXPECT_EQ(attn_work_list_words(AttnBwdWorkList{}), (std::vector<int32_t>{0, 0, kAttnBwdWorkListTag, 0}));
  const std::vector<int32_t> empty_fwd = attn_work_list_words(AttnWorkList{});
  EXPECT_EQ(attn_work_list_kind(empty_fwd.data(), 4), AttnWorkListKind::forward);
}

}  // namespace
}  // namespace rt
