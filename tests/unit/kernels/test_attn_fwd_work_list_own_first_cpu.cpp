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

struct Out {
  test::HostTensor out, lse;
};

Out run(const test::TwoKvCase& c, const AttnWorkList& list) {
  const test::HostTensor q = host(c.q, {c.B, c.n, c.H, c.D}), k1 = host(c.k1, {c.B, c.n, c.Hkv, c.D}),
                         v1 = host(c.v1, {c.B, c.n, c.Hkv, c.D}), k2 = host(c.k2, {c.B, c.R, c.Hkv, c.D}),
                         v2 = host(c.v2, {c.B, c.R, c.Hkv, c.D});
  test::HostTensor acc = test::f32({c.B, c.H, c.n, c.D}), m = test::f32({c.B, c.H, c.n}),
                   l = test::f32({c.B, c.H, c.n});  // scratch, poisoned
  test::poison(acc), test::poison(m), test::poison(l);
  AttnState scratch{acc.t, m.t, l.t};
  Out r{test::f32({c.B, c.n, c.H, c.D}), test::f32({c.B, c.H, c.n})};  // (B,Nq,H,D), (B,H,Nq)
  test::poison(r.out);
  test::poison(r.lse);
  const test::HostTensor words = test::work_list_words_tensor(attn_work_list_words(list));
  AttnSplitScratch split;
  split.slots = list.merge_slots;
  attn_fwd_work_list(q, k1, v1, k2, v2, scratch, c.mask(), words, int64_t(list.tasks.size()), r.out, r.lse, split);
  return r;
}

// Largest |a - b| over the finite entries of b relative to max |b|; 1e30 where b's -inf entries differ in a.
double max_rel_diff(const test::HostTensor& a, const test::HostTensor& b) {
  double scale = 0, diff = 0;
  for (int64_t e = 0; e < a.numel(); ++e) {
    if (std::isinf(b.f()[e])) {
      if (a.f()[e] != b.f()[e]) return 1e30;
      continue;
    }
    scale = std::max(scale, double(std::fabs(b.f()[e])));
    diff = std::max(diff, double(std::fabs(a.f()[e] - b.f()[e])));
  }
  return scale > 0 ? diff / scale : diff;
}

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
  const Out ref_whole = run(c, whole), got = run(c, list);
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
