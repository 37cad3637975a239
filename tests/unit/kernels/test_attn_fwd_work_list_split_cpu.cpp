// attn_fwd_work_list on the host over lists with split tasks (kernels/attn_work_list.h "Splits";
// kernels/cpu/attention/attn_fwd_work_list.cpp): forced splits of 2 to 8 parts on GQA (H = 4, Hkv = 2), B = 2,
// documents of length 1, one document across every rank and odd lengths: within 1e-5 of the unsplit list's result
// and of the fp64 attention, outputs and scratch NaN-poisoned first; the tasks' order does not change the bits (the
// parts merge in part order); and the refusals: a split list without its merge-slot count, a wrong count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "kernels/attn_work_list.h"
#include "parallel/schedule/doc_work_list.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {

using test::bf16_round;
using test::host;

using Out = test::WorkListOut;
using test::max_rel_diff;

void expect_split_matches(const test::TwoKvCase& c, const char* what) {
  SCOPED_TRACE(what);
  const DocWorkListInputs in = test::work_list_inputs_of(c);
  const AttnWorkList whole = doc_work_list(in);
  const Out ref_whole = test::run_work_list(c, whole);
  std::vector<double> ref_out, ref_lse;
  test::attention_forward_ref({c.B, c.n, c.list, c.H, c.Hkv, c.D}, c.q.data(), c.k_list.data(), c.v_list.data(),
                              c.mask(), ref_out, ref_lse);
  int split_seen = 0;
  for (int64_t parts : {2, 3, 8}) {
    SCOPED_TRACE(std::to_string(parts) + " parts");
    const AttnWorkList list = doc_work_list(in, test::forced_split(parts));
    ASSERT_EQ(doc_work_list_problem(list, in), "");
    split_seen += list.merge_slots > 0;
    const Out got = test::run_work_list(c, list);
    EXPECT_FALSE(test::any_nan(got.out));
    EXPECT_FALSE(test::any_nan(got.lse));
    EXPECT_LT(test::rel_err(got.out, ref_out), 1e-5) << "against fp64";
    EXPECT_LT(test::lse_err(got.lse, ref_lse), 1e-5) << "against fp64";
    EXPECT_LT(max_rel_diff(got.out, ref_whole.out), 1e-5) << "against the unsplit list";
    EXPECT_LT(max_rel_diff(got.lse, ref_whole.lse), 1e-5) << "against the unsplit list";
    // The tasks in another order (parts of a tile reversed among the rest): the same bits.
    AttnWorkList shuffled = list;
    std::vector<size_t> perm(list.tasks.size());
    for (size_t k = 0; k < perm.size(); ++k) perm[k] = perm.size() - 1 - k;
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(uint64_t(parts)));
    for (size_t k = 0; k < perm.size(); ++k) {
      shuffled.tasks[k] = list.tasks[perm[k]];
      std::copy(list.rows.begin() + std::ptrdiff_t(perm[k] * kAttnWorkRowGroups),
                list.rows.begin() + std::ptrdiff_t((perm[k] + 1) * kAttnWorkRowGroups),
                shuffled.rows.begin() + std::ptrdiff_t(k * kAttnWorkRowGroups));
    }
    const Out again = test::run_work_list(c, shuffled);
    EXPECT_EQ(std::memcmp(got.out.f(), again.out.f(), size_t(got.out.numel()) * 4), 0) << "order changed out";
    EXPECT_EQ(std::memcmp(got.lse.f(), again.lse.f(), size_t(got.lse.numel()) * 4), 0) << "order changed lse";
  }
  EXPECT_GT(split_seen, 0) << "the case must have tiles long enough to split";
}

TEST(AttnFwdWorkListSplitCpu, WithinRoundingOfUnsplitAndFp64) {
  // n = 230 + 190 = 420 own rows (gap to 512), random odd documents, two samples, GQA.
  expect_split_matches(test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 71, bf16_round),
                       "odd lengths");
  // One document across every rank: every query tile sees every key tile up to its last position.
  expect_split_matches(test::make_two_kv_case(2, 4, 2, 16, 1500, 200, 455, 1000, 1129, 9, bf16_round, {1500}),
                       "one document");
  // Documents of length 1 with a few long ones, so that some tiles have several key tiles to split.
  std::vector<int64_t> lens(700, 1);
  lens.push_back(800);
  expect_split_matches(test::make_two_kv_case(1, 4, 2, 16, 1500, 0, 300, 700, 900, 8, bf16_round, lens, 2),
                       "length 1 and one long");
}

TEST(AttnFwdWorkListSplitCpu, RefusesAWrongSlotCount) {
  const test::TwoKvCase c = test::make_two_kv_case(1, 2, 1, 16, 1500, 200, 455, 1000, 1129, 9, bf16_round, {1500});
  const AttnWorkList list = doc_work_list(test::work_list_inputs_of(c), test::forced_split(2));
  ASSERT_GT(list.merge_slots, 0);
  EXPECT_NO_THROW(test::run_work_list(c, list));
  EXPECT_THROW(test::run_work_list(c, list, 0), Error) << "a split list with no merge slots passed";
  EXPECT_THROW(test::run_work_list(c, list, list.merge_slots + 1), Error) << "another count";
  AttnWorkList bad = list;  // two parts of one tile on one slot
  for (AttnWorkTask& t : bad.tasks)
    if (t.parts > 1 && t.part == 1) {
      t.merge_slot = int16_t(t.merge_slot - 1);
      break;
    }
  EXPECT_THROW(test::run_work_list(c, bad), Error);
}

}  // namespace
}  // namespace rt
