// The forward work list's splits (parallel/schedule/doc_work_list_split.h, doc_work_list(in, split)):
//   * forced splits on small calls (documents of length 1, one document across every rank, odd lengths, B = 2, one
//     source, random calls) cover every visible (query, key) pair exactly once (brute force over every pair), the
//     parts' tiles in part order are the unsplit task's, each part has a tile, the merge slots are dense with a tile's
//     parts at its first slot + part, the tasks are heaviest first, and doc_work_list_problem passes the list;
//   * doc_work_list_problem catches two parts covering a tile, a missing part, a slot out of order;
//   * the rule: off or balanced lists stay whole; one long task among many short ones, in a last window, is split
//     (parts of at least min_part_tiles tiles, at most 8, slots within max_slots) and the simulated makespan drops;
//     doc_work_list_makespan on cases worked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>

#include "parallel/schedule/doc_work_list.h"
#include "parallel/schedule/ring_time_model.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"

namespace rt {
namespace {

float no_round(float x) { return x; }

// Brute force: every visible (query row, key row) pair of the call is in exactly one segment of exactly one task of
// its query tile; returns the first failure in words, or "".
std::string pairs_covered_once(const AttnWorkList& list, const DocWorkListInputs& in) {
  const int64_t s2 = attn_second_kv_row(in.Nk), q_tiles = (in.Nq + 127) / 128;
  const int64_t list_tiles = (in.list_rows + 127) / 128;
  const int64_t qs = in.q_stride > 0 ? in.q_stride : in.Nq, ks = in.k_stride > 0 ? in.k_stride : in.list_rows;
  // covers[(b q_tiles + qt) list_tiles + t]: how many segments of the tile's tasks hold key tile t.
  std::vector<int> covers(size_t(in.B * q_tiles * list_tiles), 0);
  for (const AttnWorkTask& task : list.tasks)
    for (int s = task.first_seg; s < task.first_seg + task.segs; ++s) {
      const AttnKeySeg& seg = list.segs[size_t(s)];
      for (int64_t t = seg.first_tile; t < int64_t(seg.first_tile) + seg.tiles; ++t)
        ++covers[size_t((task.sample * q_tiles + task.q_row / 128) * list_tiles + t)];
    }
  for (int64_t b = 0; b < in.B; ++b)
    for (int64_t i = 0; i < in.Nq; ++i)
      for (int64_t j = 0; j < in.list_rows; ++j) {
        if (j >= in.Nk && j < s2) continue;  // the gap holds no key
        const int64_t kp = in.k_pos[size_t(b * ks + j)];
        if (!(in.q_doc_start[size_t(b * qs + i)] <= kp && kp <= in.q_pos[size_t(b * qs + i)])) continue;
        const int n = covers[size_t((b * q_tiles + i / 128) * list_tiles + j / 128)];
        if (n != 1)
          return "sample " + std::to_string(b) + ": the pair (query " + std::to_string(i) + ", key " +
                 std::to_string(j) + ") is in " + std::to_string(n) + " segments";
      }
  return "";
}

// The tiles of one task in visit order.
std::vector<int64_t> tiles_of(const AttnWorkList& list, const AttnWorkTask& task) {
  std::vector<int64_t> out;
  for (int s = task.first_seg; s < task.first_seg + task.segs; ++s)
    for (int64_t t = 0; t < list.segs[size_t(s)].tiles; ++t) out.push_back(list.segs[size_t(s)].first_tile + t);
  return out;
}

// Every check of a split list against the unsplit one of the same call.
void expect_split_valid(const DocWorkListInputs& in, int64_t parts, const char* what) {
  SCOPED_TRACE(std::string(what) + ", " + std::to_string(parts) + " parts");
  const DocWorkListSplit s = test::forced_split(parts);
  const AttnWorkList whole = doc_work_list(in), list = doc_work_list(in, s);
  EXPECT_EQ(doc_work_list_problem(list, in), "");
  EXPECT_EQ(pairs_covered_once(list, in), "");
  // Each tile's parts in part order are the unsplit task's tiles; the parts as forced.
  int64_t split_tiles = 0, slots = 0;
  for (const AttnWorkTask& w : whole.tasks) {
    const std::vector<int64_t> want = tiles_of(whole, w);
    const int64_t p = std::min<int64_t>({parts, int64_t(want.size()), kAttnWorkMaxParts});
    std::vector<const AttnWorkTask*> mine(size_t(std::max<int64_t>(p, 1)), nullptr);
    for (const AttnWorkTask& t : list.tasks)
      if (t.sample == w.sample && t.q_row == w.q_row) {
        ASSERT_EQ(t.parts, p >= 2 ? p : 1) << "the tile at row " << w.q_row;
        ASSERT_LT(t.part, int64_t(mine.size()));
        EXPECT_EQ(mine[size_t(t.part)], nullptr) << "part " << int(t.part) << " twice";
        mine[size_t(t.part)] = &t;
      }
    std::vector<int64_t> got;
    for (const AttnWorkTask* t : mine) {
      ASSERT_NE(t, nullptr) << "a part is missing";
      EXPECT_GE(t->segs, 1);
      const std::vector<int64_t> part = tiles_of(list, *t);
      EXPECT_GE(part.size(), 1u);
      got.insert(got.end(), part.begin(), part.end());
      if (p >= 2) EXPECT_EQ(t->merge_slot, mine[0]->merge_slot + t->part);
      else EXPECT_EQ(t->merge_slot, -1);
    }
    EXPECT_EQ(got, want) << "the parts' tiles in part order";
    if (p >= 2) ++split_tiles, slots += p;
  }
  EXPECT_EQ(list.merge_slots, slots);
  EXPECT_EQ(list.tasks.size(), whole.tasks.size() + size_t(slots - split_tiles));
  // Heaviest first by the model's unit cost.
  for (size_t k = 1; k < list.tasks.size(); ++k) {
    const double a = doc_work_list_unit_cost(int64_t(tiles_of(list, list.tasks[k - 1]).size()),
                                             list.tasks[k - 1].parts > 1, s);
    const double b = doc_work_list_unit_cost(int64_t(tiles_of(list, list.tasks[k]).size()), list.tasks[k].parts > 1, s);
    EXPECT_GE(a, b) << "tasks " << k - 1 << " and " << k;
  }
  // The words round trip keeps the slots.
  const std::vector<int32_t> words = attn_work_list_words(list);
  EXPECT_EQ(attn_work_list_from_words(words.data(), int64_t(words.size())).merge_slots, list.merge_slots);
}

TEST(DocWorkListSplit, ForcedSplitsCoverEveryPairOnce) {
  // Odd lengths, B = 2, two sources with a gap (GQA has no part in the list: it is per query tile and key tile).
  const DocWorkListInputs odd =
      test::work_list_inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round));
  // Documents of length 1: a query sees only its own key (most tiles hold one tile: too short to split).
  const DocWorkListInputs ones = test::work_list_inputs_of(test::make_two_kv_case(
      1, 1, 1, 1, 900, 0, 300, 500, 640, 8, no_round, std::vector<int64_t>(900, 1), 2));
  // One document across every rank: every query tile sees every key tile up to its last position.
  const DocWorkListInputs one_doc =
      test::work_list_inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1500, 200, 455, 1000, 1129, 9, no_round, {1500}));
  for (int64_t parts : {2, 3, 5, 8, 9}) {
    expect_split_valid(odd, parts, "odd lengths, B = 2");
    expect_split_valid(ones, parts, "length 1");
    expect_split_valid(one_doc, parts, "one document");
  }
  DocWorkListInputs one_source = odd;  // own keys only
  one_source.list_rows = one_source.Nk;
  one_source.k_stride = odd.list_rows;
  expect_split_valid(one_source, 3, "one source");
}

TEST(DocWorkListSplit, RandomSmallCallsCoverEveryPairOnce) {
  std::mt19937_64 rng(46);
  for (int c = 0; c < 150; ++c) {
    const DocWorkListInputs in = test::random_work_list_inputs(rng);
    const std::string what = "random case " + std::to_string(c);
    expect_split_valid(in, 2 + int64_t(rng() % 7), what.c_str());
    if (HasFailure()) return;
  }
}

TEST(DocWorkListSplit, ProblemCatchesBrokenSplits) {
  const DocWorkListInputs in =
      test::work_list_inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1500, 200, 455, 1000, 1129, 9, no_round, {1500}));
  const AttnWorkList good = doc_work_list(in, test::forced_split(3));
  ASSERT_EQ(doc_work_list_problem(good, in), "");
  ASSERT_GT(good.merge_slots, 0);
  size_t first = 0;  // a part 1 with a part 0 of more than one tile before it
  while (!(good.tasks[first].parts > 1 && good.tasks[first].part == 1)) ++first;
  {
    AttnWorkList twice = good;  // part 1 repeats part 0's tiles too: those pairs are covered twice
    AttnWorkTask& t = twice.tasks[first];
    AttnKeySeg& seg = twice.segs[size_t(t.first_seg)];
    seg.first_tile -= 1;
    seg.tiles += 1;
    EXPECT_NE(doc_work_list_problem(twice, in), "");
  }
  {
    AttnWorkList missing = good;  // a part dropped
    missing.tasks.erase(missing.tasks.begin() + std::ptrdiff_t(first));
    missing.rows.erase(missing.rows.begin() + std::ptrdiff_t(first * kAttnWorkRowGroups),
                       missing.rows.begin() + std::ptrdiff_t((first + 1) * kAttnWorkRowGroups));
    EXPECT_NE(doc_work_list_problem(missing, in), "");
  }
  {
    AttnWorkList slot = good;  // part 1 at its tile's first slot + 2
    slot.tasks[first].merge_slot = int16_t(slot.tasks[first].merge_slot + 1);
    EXPECT_NE(doc_work_list_problem(slot, in), "");
  }
  {
    AttnWorkList count = good;  // one slot too many: not dense
    ++count.merge_slots;
    EXPECT_NE(doc_work_list_problem(count, in), "");
  }
}

TEST(DocWorkListSplit, MakespanByHand) {
  // 2 slots, one head: 3, 2, 2 -> slot A 3, slot B 2 + 2 = 4.
  EXPECT_DOUBLE_EQ(doc_work_list_makespan({3, 2, 2}, 1, 1, 2), 4.0);
  // One slot: the sum over heads.
  EXPECT_DOUBLE_EQ(doc_work_list_makespan({3, 2, 2}, 4, 1, 1), 28.0);
  // As many slots as units: the longest.
  EXPECT_DOUBLE_EQ(doc_work_list_makespan({5, 1}, 3, 3, 6), 5.0);
  // Windows of one head: head 1's 5 starts after head 0's 5 and 1 fill the two slots: slot B free at 1 -> ends 6.
  EXPECT_DOUBLE_EQ(doc_work_list_makespan({5, 1}, 2, 1, 2), 6.0);
}

TEST(DocWorkListSplit, RuleSplitsALongTaskInTheLastWindowOnly) {
  DocWorkListSplit s;
  s.heads = 16, s.ctas = 132, s.head_window = 1;
  std::vector<int64_t> tiles(64, 10);  // 64 query tiles of 10 key tiles, one of 120 (heaviest first)
  tiles[0] = 120;
  EXPECT_EQ(doc_work_list_split_parts(tiles, s), std::vector<int>(64, 1)) << "off";
  s.on = true;
  const std::vector<int> parts = doc_work_list_split_parts(tiles, s);
  EXPECT_GE(parts[0], 2) << "the long task";
  EXPECT_LE(parts[0], 8);
  EXPECT_GE(tiles[0] / parts[0], s.min_part_tiles);
  for (size_t i = 1; i < parts.size(); ++i) EXPECT_EQ(parts[i], 1) << "task " << i;
  auto span = [&](const std::vector<int>& p) {
    std::vector<double> c;
    for (size_t i = 0; i < tiles.size(); ++i)
      for (int k = 0; k < p[i]; ++k)
        c.push_back(doc_work_list_unit_cost(tiles[i] / p[i] + (k < tiles[i] % p[i] ? 1 : 0), p[i] > 1, s));
    std::sort(c.begin(), c.end(), std::greater<double>());
    return doc_work_list_makespan(c, s.heads, s.head_window, s.ctas);
  };
  EXPECT_LT(span(parts), 0.8 * span(std::vector<int>(64, 1))) << "the tail of the last head's long unit";
  // Balanced: every task the same: nothing to gain.
  EXPECT_EQ(doc_work_list_split_parts(std::vector<int64_t>(640, 12), s), std::vector<int>(640, 1));
  // The slots bound the splitting: none left.
  DocWorkListSplit tight = s;
  tight.max_slots = 1;
  EXPECT_EQ(doc_work_list_split_parts(tiles, tight), std::vector<int>(64, 1));
  // Too short to cut into parts of min_part_tiles.
  std::vector<int64_t> short_tiles(64, 1);
  short_tiles[0] = 15;
  EXPECT_EQ(doc_work_list_split_parts(short_tiles, s), std::vector<int>(64, 1));
}

TEST(DocWorkListSplit, OnFromTheFit) {
  const DocWorkListSplit s = doc_work_list_split_for(16, 128, 132);
  EXPECT_TRUE(s.on);
  const KernelTimeModel fwd = gather_kernel_time_model(false, 128);
  EXPECT_NEAR(s.task_tiles, fwd.query_tile_us / fwd.full_us, 1e-9);  // the gather forward's per-task cost in tiles
  EXPECT_GT(s.task_tiles, 1.0);
  // doc_work_list with the rule on a small call (nothing stands out at 132 CTAs): the unsplit list.
  const DocWorkListInputs in =
      test::work_list_inputs_of(test::make_two_kv_case(1, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round));
  const AttnWorkList a = doc_work_list(in), b = doc_work_list(in, s);
  EXPECT_EQ(b.merge_slots, 0);
  EXPECT_EQ(attn_work_list_words(a), attn_work_list_words(b));
}

TEST(DocWorkListSplit, FromTheEnvironment) {
  ::unsetenv("RT_ATTN_WORK_LIST_SPLIT");
  EXPECT_FALSE(doc_work_list_split_from_env(16, 128, 132, 1).on) << "unset: off";
  ::setenv("RT_ATTN_WORK_LIST_SPLIT", "0", 1);
  EXPECT_FALSE(doc_work_list_split_from_env(16, 128, 132, 1).on);
  ::setenv("RT_ATTN_WORK_LIST_SPLIT", "1", 1);
  const DocWorkListSplit on = doc_work_list_split_from_env(8, 128, 100, 2);
  EXPECT_TRUE(on.on);
  EXPECT_EQ(on.heads, 8);
  EXPECT_EQ(on.ctas, 100);
  EXPECT_EQ(on.head_window, 2);
  ::setenv("RT_ATTN_WORK_LIST_SPLIT", "yes", 1);
  EXPECT_THROW(doc_work_list_split_from_env(16, 128, 132, 1), Error);
  ::unsetenv("RT_ATTN_WORK_LIST_SPLIT");
}

}  // namespace
}  // namespace rt
