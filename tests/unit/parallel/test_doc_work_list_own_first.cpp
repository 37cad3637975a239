// The forward work list's own-first order (parallel/schedule/doc_work_list_split.h doc_work_list_own_first,
// doc_work_list_ordered): on small calls (odd lengths with B = 2, documents of length 1, one document across every
// rank, one source, random calls) the list is valid for the call and tight (doc_work_list_problem: every visible
// (query, key) pair in exactly one segment of one part, by brute force over every pair; parts, slots, bounds), every
// task with own tiles comes before every task with a gathered tile (doc_work_list_phases, and checked here segment by
// segment), each phase is heaviest first by the unit cost, a mixed task is cut into exactly its own tiles (part 0)
// and its gathered tiles (part 1), unmixed tasks stay whole, and the default order is unchanged.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "parallel/schedule/doc_work_list.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"

namespace rt {
namespace {

float no_round(float x) { return x; }

struct TaskTiles {
  int64_t own = 0, got = 0;
};
TaskTiles tiles_by_source(const AttnWorkList& list, const AttnWorkTask& t) {
  TaskTiles n;
  for (int s = t.first_seg; s < t.first_seg + t.segs; ++s)
    (list.segs[size_t(s)].source < 0 ? n.own : n.got) += list.segs[size_t(s)].tiles;
  return n;
}

void expect_own_first_valid(const DocWorkListInputs& in, const char* what) {
  SCOPED_TRACE(what);
  const DocWorkListSplit costs;
  const AttnWorkList whole = doc_work_list(in);
  const AttnWorkList list = doc_work_list_ordered(in, DocWorkListOrder::own_first, costs);
  ASSERT_EQ(doc_work_list_problem(list, in), "");
  // The default order is doc_work_list's.
  EXPECT_EQ(attn_work_list_words(doc_work_list_ordered(in, DocWorkListOrder::heaviest_first)),
            attn_work_list_words(whole));
  // Phases: no own tile after the first gathered one.
  bool seen_gathered = false;
  for (size_t k = 0; k < list.tasks.size(); ++k) {
    const TaskTiles n = tiles_by_source(list, list.tasks[k]);
    EXPECT_FALSE(n.own > 0 && n.got > 0) << "task " << k << " mixes own and gathered tiles";
    if (n.own > 0) {
      EXPECT_FALSE(seen_gathered) << "task " << k << " has own tiles after a gathered task";
    }
    seen_gathered |= n.got > 0;
  }
  const DocWorkListPhases ph = doc_work_list_phases(list);
  EXPECT_TRUE(ph.own_first);
  // Heaviest first within each phase.
  for (size_t k = 1; k < list.tasks.size(); ++k) {
    const TaskTiles a = tiles_by_source(list, list.tasks[k - 1]), b = tiles_by_source(list, list.tasks[k]);
    if ((a.got > 0) != (b.got > 0)) continue;  // the phase boundary
    EXPECT_GE(doc_work_list_unit_cost(a.own + a.got, list.tasks[k - 1].parts > 1, costs),
              doc_work_list_unit_cost(b.own + b.got, list.tasks[k].parts > 1, costs))
        << "tasks " << k - 1 << " and " << k;
  }
  // Mixed tasks cut at the source boundary, the others whole; slots two per cut task.
  int64_t mixed = 0;
  for (const AttnWorkTask& w : whole.tasks) {
    const TaskTiles n = tiles_by_source(whole, w);
    const bool mix = n.own > 0 && n.got > 0;
    mixed += mix;
    int found = 0;
    for (const AttnWorkTask& t : list.tasks) {
      if (t.sample != w.sample || t.q_row != w.q_row) continue;
      ++found;
      const TaskTiles m = tiles_by_source(list, t);
      if (!mix) {
        EXPECT_EQ(t.parts, 1);
        EXPECT_EQ(t.merge_slot, -1);
        EXPECT_EQ(m.own, n.own);
        EXPECT_EQ(m.got, n.got);
      } else {
        EXPECT_EQ(t.parts, 2);
        EXPECT_EQ(t.part == 0 ? m.own : m.got, t.part == 0 ? n.own : n.got);
        EXPECT_EQ(t.part == 0 ? m.got : m.own, 0);
      }
    }
    EXPECT_EQ(found, mix ? 2 : 1) << "the tile at row " << w.q_row << " of sample " << w.sample;
  }
  EXPECT_EQ(list.merge_slots, 2 * mixed);
  EXPECT_EQ(list.tasks.size(), whole.tasks.size() + size_t(mixed));
  if (in.list_rows == in.Nk) {
    EXPECT_EQ(attn_work_list_words(list), attn_work_list_words(whole)) << "one source";
  }
}

TEST(DocWorkListOwnFirst, SmallCallsValidAndOrdered) {
  const DocWorkListInputs odd =
      test::work_list_inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1400, 150, 380, 900, 1090, 71, no_round));
  const DocWorkListInputs ones = test::work_list_inputs_of(test::make_two_kv_case(
      1, 1, 1, 1, 900, 0, 300, 500, 640, 8, no_round, std::vector<int64_t>(900, 1), 2));
  const DocWorkListInputs one_doc =
      test::work_list_inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1500, 200, 455, 1000, 1129, 9, no_round, {1500}));
  expect_own_first_valid(odd, "odd lengths, B = 2");
  expect_own_first_valid(ones, "length 1");
  expect_own_first_valid(one_doc, "one document");
  // The one-document case has mixed tiles (every query tile past the own rows sees gathered keys too).
  const AttnWorkList l = doc_work_list_ordered(one_doc, DocWorkListOrder::own_first);
  EXPECT_GT(l.merge_slots, 0);
  DocWorkListInputs one_source = odd;
  one_source.list_rows = one_source.Nk;
  one_source.k_stride = odd.list_rows;
  expect_own_first_valid(one_source, "one source");
}

TEST(DocWorkListOwnFirst, RandomSmallCalls) {
  std::mt19937_64 rng(4646);
  for (int c = 0; c < 150; ++c) {
    const DocWorkListInputs in = test::random_work_list_inputs(rng);
    expect_own_first_valid(in, ("random case " + std::to_string(c)).c_str());
    if (HasFailure()) return;
  }
}

TEST(DocWorkListOwnFirst, PhasesDetectAnOwnTaskAfterAGatheredOne) {
  const DocWorkListInputs in =
      test::work_list_inputs_of(test::make_two_kv_case(2, 1, 1, 1, 1500, 200, 455, 1000, 1129, 9, no_round, {1500}));
  AttnWorkList list = doc_work_list_ordered(in, DocWorkListOrder::own_first);
  ASSERT_TRUE(doc_work_list_phases(list).own_first);
  ASSERT_LT(doc_work_list_phases(list).first_gathered, list.tasks.size());
  std::swap(list.tasks.front(), list.tasks.back());  // a gathered part first, an own task last
  EXPECT_FALSE(doc_work_list_phases(list).own_first);
  EXPECT_EQ(doc_work_list_phases(list).first_gathered, 0u);
  // The heaviest-first list of a call with mixed tiles is not own-first.
  EXPECT_FALSE(doc_work_list_phases(doc_work_list(in)).own_first);
  // Refuses a list that is already split.
  DocWorkListSplit forced;
  forced.on = true, forced.force_parts = 2, forced.min_part_tiles = 1, forced.max_slots = 1 << 14;
  EXPECT_THROW(doc_work_list_own_first(doc_work_list(in, forced), DocWorkListSplit{}), Error);
}

}  // namespace
}  // namespace rt
