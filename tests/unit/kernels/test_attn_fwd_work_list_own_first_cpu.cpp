// attn_fwd_work_list on the host over the own-first list (parallel/schedule/doc_work_list.h doc_work_list_ordered
// own_first: mixed tasks cut into an own part and a gathered part, merged in part order): within 1e-5 of the unsplit
// (heaviest-first) list's result and of the fp64 attention, on GQA (H = 4, Hkv = 2), B = 2, odd lengths, one document
// across every rank and documents of length 1 (no cut task there: the list is
// heaviest-first's reordered); outputs and scratch poisoned first, NaN fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

// need_cut: the case has query tiles that see own and gathered keys (so the list holds cut tasks).
void expect_own_first_matches(const test::TwoKvCase& c, const char* what, bool need_cut = true) {
  SCOPED_TRACE(what);
  const DocWorkListInputs in = test::work_list_inputs_of(c);
  const AttnWorkList whole = doc_work_list(in);
  const AttnWorkList list = doc_work_list_ordered(in, DocWorkListOrder::own_first);
  ASSERT_EQ(doc_work_list_problem(list, in), "");
  if (need_cut) {
    ASSERT_GT(list.merge_slots, 0) << "the case must have query tiles that see own and gathered keys";
  }
  const Out ref_whole = test::run_work_list(c, whole), got = test::run_work_list(c, list);
  std::vector<double> ref_out, ref_lse;
  test::attention_forward_ref({c.B, c.n, c.list, c.H, c.Hkv, c.D}, c.q.data(), c.k_list.data(), c.v_list.data(),
                              c.mask(), ref_out, ref_lse);
  EXPECT_FALSE(test::any_nan(got.out));
  EXPECT_FALSE(test::any_nan(got.lse));
  EXPECT_LT(max_rel_diff(got.out, ref_whole.out), 1e-5) << "against the unsplit list";
  EXPECT_LT(max_rel_diff(got.lse, ref_whole.lse), 1e-5) << "against the unsplit list";
  EXPECT_LT(test::rel_err(got.out, ref_out), 1e-5) << "against fp64";
  EXPECT_LT(test::lse_err(got.lse, ref_lse), 1e-5) << "against fp64";
}

TEST(AttnFwdWorkListOwnFirstCpu, WithinRoundingOfUnsplitAndFp64) {
  expect_own_first_matches(test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 71, bf16_round),
                           "odd lengths, B = 2");
  expect_own_first_matches(test::make_two_kv_case(2, 4, 2, 16, 1500, 200, 455, 1000, 1129, 9, bf16_round, {1500}),
                           "one document");
  std::vector<int64_t> lens(700, 1);
  lens.push_back(800);
  expect_own_first_matches(test::make_two_kv_case(1, 4, 2, 16, 1500, 0, 300, 700, 900, 8, bf16_round, lens, 2),
                           "length 1 and one long", /*need_cut=*/false);
}

}  // namespace
}  // namespace rt
