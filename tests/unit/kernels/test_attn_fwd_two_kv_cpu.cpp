// attn_fwd_whole_two_kv on the host (kernels/cpu/attention/attn_fwd_fused.cpp): one forward over the keys of two
// sources as one key list equals the fp64 attention over that list (the gap rows between the sources masked by
// their position), on fresh random bf16-rounded values, with GQA, documents of length 1 and rows that see no key of
// one source or of either (lse -inf, out 0); outputs poisoned first. And the argument checks: no causal mask, no row
// ranges, a k_stride that covers the list, matching shapes.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {

using test::bf16_round;
using test::host;

struct TwoKvOut {
  test::HostTensor out, lse;
};

TwoKvOut run_two_kv(const test::TwoKvCase& c, const AttnMask& mask) {
  const test::HostTensor q = host(c.q, {c.B, c.n, c.H, c.D}), k1 = host(c.k1, {c.B, c.n, c.Hkv, c.D}),
                         v1 = host(c.v1, {c.B, c.n, c.Hkv, c.D}), k2 = host(c.k2, {c.B, c.R, c.Hkv, c.D}),
                         v2 = host(c.v2, {c.B, c.R, c.Hkv, c.D});
  test::HostTensor acc = test::f32({c.B, c.H, c.n, c.D}), m = test::f32({c.B, c.H, c.n}),
                   l = test::f32({c.B, c.H, c.n});
  AttnState scratch{acc.t, m.t, l.t};
  TwoKvOut r{test::f32({c.B, c.n, c.H, c.D}), test::f32({c.B, c.H, c.n})};
  test::poison(r.out);
  test::poison(r.lse);
  attn_fwd_whole_two_kv(q, k1, v1, k2, v2, scratch, mask, r.out, r.lse);
  return r;
}

TEST(AttnFwdTwoKvCpu, EqualsTheFp64AttentionOverTheKeyList) {
  // n = 230 + 190 = 420 own rows: the gap is 512 - 420 = 92 rows. Two samples with different documents.
  const test::TwoKvCase c = test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 71, bf16_round);
  ASSERT_GT(c.R, 0);
  ASSERT_GT(c.list - c.R, c.n) << "the case must have gap rows";
  const TwoKvOut got = run_two_kv(c, c.mask());
  std::vector<double> ref_out, ref_lse;
  test::attention_forward_ref({c.B, c.n, c.list, c.H, c.Hkv, c.D}, c.q.data(), c.k_list.data(), c.v_list.data(),
                              c.mask(), ref_out, ref_lse);
  int both = 0;  // rows that see keys of both sources
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.n; ++i) {
      bool one = false, two = false;
      for (int64_t j = 0; j < c.list; ++j) {
        const int64_t kp = c.k_pos[size_t(b * c.list + j)];
        if (c.q_doc[size_t(b * c.n + i)] <= kp && kp <= c.q_pos[size_t(b * c.n + i)]) (j < c.n ? one : two) = true;
      }

      both += one && two;
    }
  EXPECT_GT(both, 50) << "the case must have rows that see keys of both sources";
  EXPECT_FALSE(test::any_nan(got.out));
  EXPECT_LT(test::rel_err(got.out, ref_out), 1e-5);
  EXPECT_LT(test::lse_err(got.lse, ref_lse), 1e-5);
}

TEST(AttnFwdTwoKvCpu, RowsWithoutKeysGetZeroAndMinusInfinity) {
  // Queries whose documents hold no key of either source: a document of one token is its own key, so make the
  // queries see nothing by giving source 1's keys positions past every query (T) except the first row's.
  test::TwoKvCase c = test::make_two_kv_case(1, 2, 1, 16, 600, 100, 180, 300, 340, 5, bf16_round);
  for (int64_t j = 1; j < c.n; ++j) c.k_pos[size_t(j)] = c.T;
  for (int64_t j = attn_second_kv_row(c.n); j < c.list; ++j) c.k_pos[size_t(j)] = c.T;
  const TwoKvOut got = run_two_kv(c, c.mask());
  std::vector<double> ref_out, ref_lse;
  test::attention_forward_ref({c.B, c.n, c.list, c.H, c.Hkv, c.D}, c.q.data(), c.k_list.data(), c.v_list.data(),
                              c.mask(), ref_out, ref_lse);
  int empty = 0;
  for (int64_t i = 0; i < c.n; ++i) {
    if (!std::isinf(ref_lse[size_t(i)])) continue;
    ++empty;
    EXPECT_TRUE(std::isinf(got.lse[i]) && got.lse[i] < 0) << "row " << i;
    for (int64_t d = 0; d < c.D; ++d) EXPECT_EQ(got.out[i * c.H * c.D + d], 0.f) << "row " << i;
  }
  EXPECT_GT(empty, 10);
  EXPECT_LT(test::rel_err(got.out, ref_out), 1e-5);
  EXPECT_LT(test::lse_err(got.lse, ref_lse), 1e-5);
}

TEST(AttnFwdTwoKvCpu, RefusesMasksItCannotTake) {
  const test::TwoKvCase c = test::make_two_kv_case(1, 2, 1, 16, 500, 0, 130, 300, 330, 9, bf16_round);
  AttnMask causal = c.mask();
  causal.causal = true;
  EXPECT_THROW(run_two_kv(c, causal), Error);
  AttnMask ranged = c.mask();
  ranged.q_begin = 1;
  EXPECT_THROW(run_two_kv(c, ranged), Error);
  AttnMask short_stride = c.mask();
  short_stride.docs.k_stride = c.list - 1;  // the list does not fit
  EXPECT_THROW(run_two_kv(c, short_stride), Error);
  AttnMask none = c.mask();
  none.docs = AttnDocs{};
  EXPECT_THROW(run_two_kv(c, none), Error);
  EXPECT_NO_THROW(run_two_kv(c, c.mask()));
}

}  // namespace
}  // namespace rt
