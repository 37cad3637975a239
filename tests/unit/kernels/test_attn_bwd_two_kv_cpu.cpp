// attn_bwd_block_fresh_two_kv on the host (kernels/cpu/attention/attn_bwd_block_fresh.cpp): one backward over the
// keys of two sources as one key list equals the fp64 gradients over that list (tests/unit/kernels/two_kv_case.h),
// on fresh random bf16-rounded values with GQA, two samples, documents of length 1, and source 2 ending in rows no
// query sees (their dK / dV must be written as zero). dk / dv / dk2 / dv2 are NaN-poisoned first (every row must be
// overwritten), dq_acc starts from random values (the op adds). And the argument checks.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {

using test::bf16_round;
using test::host;

test::HostTensor host(const std::vector<double>& v, const std::vector<int64_t>& dims) {
  return host(std::vector<float>(v.begin(), v.end()), dims);
}

struct TwoKvBwd {
  test::HostTensor dq, dk1, dv1, dk2, dv2;
  std::vector<double> dq_start;
};

TwoKvBwd run_bwd(const test::TwoKvCase& c, const std::vector<float>& dout, const test::TwoKvGrads& g,
                 const AttnMask& mask) {
  const test::HostTensor q = host(c.q, {c.B, c.n, c.H, c.D}), k1 = host(c.k1, {c.B, c.n, c.Hkv, c.D}),
                         v1 = host(c.v1, {c.B, c.n, c.Hkv, c.D}), k2 = host(c.k2, {c.B, c.R, c.Hkv, c.D}),
                         v2 = host(c.v2, {c.B, c.R, c.Hkv, c.D}), d_out = host(dout, {c.B, c.n, c.H, c.D}),
                         lse = host(g.lse, {c.B, c.H, c.n}), delta = host(g.delta, {c.B, c.H, c.n});
  TwoKvBwd r{test::random_f32({c.B, c.n, c.H, c.D}, 91), test::f32({c.B, c.n, c.Hkv, c.D}),
             test::f32({c.B, c.n, c.Hkv, c.D}), test::f32({c.B, c.R, c.Hkv, c.D}), test::f32({c.B, c.R, c.Hkv, c.D}),
             {}};
  for (int64_t e = 0; e < r.dq.numel(); ++e) r.dq_start.push_back(r.dq[e]);
  test::poison(r.dk1);
  test::poison(r.dv1);
  test::poison(r.dk2);
  test::poison(r.dv2);
  attn_bwd_block_fresh_two_kv(q, k1, v1, k2, v2, d_out, lse, delta, r.dq, r.dk1, r.dv1, r.dk2, r.dv2, mask);
  return r;
}

std::vector<float> random_dout(const test::TwoKvCase& c, uint64_t seed) {
  const test::HostTensor h = test::random_f32({c.B, c.n, c.H, c.D}, seed);
  std::vector<float> d(size_t(h.numel()));
  for (int64_t e = 0; e < h.numel(); ++e) d[size_t(e)] = bf16_round(h[e]);
  return d;
}

TEST(AttnBwdTwoKvCpu, EqualsTheFp64GradientsOverTheKeyList) {
  // n = 230 + 190 = 420 own rows (a gap of 92 rows); source 2 padded with 200 rows no query sees.
  test::TwoKvCase c = test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 73, bf16_round);
  test::pad_second_source(c, 200, 7, bf16_round);
  ASSERT_GT(c.list - c.R, c.n) << "the case must have gap rows";
  const std::vector<float> dout = random_dout(c, 5);
  const test::TwoKvGrads g = test::two_kv_grads(c, dout);
  const TwoKvBwd got = run_bwd(c, dout, g, c.mask());
  for (const test::HostTensor* t : {&got.dq, &got.dk1, &got.dv1, &got.dk2, &got.dv2}) EXPECT_FALSE(test::any_nan(*t));
  EXPECT_LT(test::rel_err(test::minus(got.dq, got.dq_start), g.dq), 1e-5);
  EXPECT_LT(test::rel_err(got.dk1, g.dk1), 1e-5);
  EXPECT_LT(test::rel_err(got.dv1, g.dv1), 1e-5);
  EXPECT_LT(test::rel_err(got.dk2, g.dk2), 1e-5);
  EXPECT_LT(test::rel_err(got.dv2, g.dv2), 1e-5);
  // Both sources carry gradient, and the padding rows (seen by no query) are written as zero.
  double seen2 = 0;
  for (double x : g.dv2) seen2 += x * x;
  EXPECT_GT(seen2, 1.0);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t e = (b * c.R + c.R - 200) * c.Hkv * c.D; e < (b + 1) * c.R * c.Hkv * c.D; ++e) {
      ASSERT_EQ(got.dk2[e], 0.f) << "sample " << b << " element " << e;
      ASSERT_EQ(got.dv2[e], 0.f) << "sample " << b << " element " << e;
    }
}

TEST(AttnBwdTwoKvCpu, RefusesMasksItCannotTake) {
  const test::TwoKvCase c = test::make_two_kv_case(1, 2, 1, 16, 500, 0, 130, 300, 330, 9, bf16_round);
  const std::vector<float> dout = random_dout(c, 3);
  const test::TwoKvGrads g = test::two_kv_grads(c, dout);
  AttnMask causal = c.mask();
  causal.causal = true;
  EXPECT_THROW(run_bwd(c, dout, g, causal), Error);
  AttnMask ranged = c.mask();
  ranged.k_begin = 1;
  EXPECT_THROW(run_bwd(c, dout, g, ranged), Error);
  AttnMask short_stride = c.mask();
  short_stride.docs.k_stride = c.list - 1;  // the list does not fit
  EXPECT_THROW(run_bwd(c, dout, g, short_stride), Error);
  AttnMask none = c.mask();
  none.docs = AttnDocs{};
  EXPECT_THROW(run_bwd(c, dout, g, none), Error);
  EXPECT_NO_THROW(run_bwd(c, dout, g, c.mask()));
}

}  // namespace
}  // namespace rt
