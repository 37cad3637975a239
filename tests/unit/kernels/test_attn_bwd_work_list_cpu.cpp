// attn_bwd_work_list on the host (kernels/cpu/attention/attn_bwd_work_list.cpp) over doc_bwd_work_list's list
// (parallel/schedule/doc_work_list.h): equal to the fp64 gradients over the key list (tests/unit/kernels/two_kv_case.h)
// and bit for bit to attn_bwd_block_fresh_two_kv (the same tile steps; each dK / dV and dq_acc entry gets its terms in
// the same order), with GQA (H = 4, Hkv = 2), B = 2, documents of length 1, one document across everything, source 2
// ending in key tiles no query sees, and one source. dk, dv, dk2, dv2 are NaN-poisoned first (every row must be
// written), dq_acc starts from random values (the op adds). The list's task order does not change the bits. And the
// refusals: a forward list, a split task, a key tile listed twice, a segment past the query tiles, a gathered tile
// with no second source.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kernels/attn_work_list.h"
#include "parallel/schedule/doc_work_list.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {

DocWorkListInputs inputs_of(const test::TwoKvCase& c) { return test::work_list_inputs_of(c); }
test::HostTensor words_tensor(const std::vector<int32_t>& w) { return test::work_list_words_tensor(w); }

using test::bf16_round;
using test::host;

test::HostTensor host(const std::vector<double>& v, const std::vector<int64_t>& dims) {
  return host(std::vector<float>(v.begin(), v.end()), dims);
}

std::vector<float> random_dout(const test::TwoKvCase& c, uint64_t seed) {
  const test::HostTensor h = test::random_f32({c.B, c.n, c.H, c.D}, seed);
  std::vector<float> d(size_t(h.numel()));
  for (int64_t e = 0; e < h.numel(); ++e) d[size_t(e)] = bf16_round(h[e]);
  return d;
}

struct Grads {
  test::HostTensor dq, dk1, dv1, dk2, dv2;
  std::vector<double> dq_start;
};

enum class Via { list, two_kv, list_one_source, fresh_one_source };

// lse, delta: the fp64 reference's (the same f32 values for every run). One source: k2 / v2 / dk2 / dv2 undefined.
Grads run(const test::TwoKvCase& c, const std::vector<float>& dout, const std::vector<double>& lse_ref,
          const std::vector<double>& delta_ref, const test::HostTensor* list, Via how, const AttnMask& mask) {
  const test::HostTensor q = host(c.q, {c.B, c.n, c.H, c.D}), k1 = host(c.k1, {c.B, c.n, c.Hkv, c.D}),
                         v1 = host(c.v1, {c.B, c.n, c.Hkv, c.D}), k2 = host(c.k2, {c.B, c.R, c.Hkv, c.D}),
                         v2 = host(c.v2, {c.B, c.R, c.Hkv, c.D}), d_out = host(dout, {c.B, c.n, c.H, c.D}),
                         lse = host(lse_ref, {c.B, c.H, c.n}), delta = host(delta_ref, {c.B, c.H, c.n});
  Grads r{test::random_f32({c.B, c.n, c.H, c.D}, 91), test::f32({c.B, c.n, c.Hkv, c.D}),
          test::f32({c.B, c.n, c.Hkv, c.D}), test::f32({c.B, c.R, c.Hkv, c.D}), test::f32({c.B, c.R, c.Hkv, c.D}),
          {}};
  for (int64_t e = 0; e < r.dq.numel(); ++e) r.dq_start.push_back(r.dq[e]);
  for (test::HostTensor* t : {&r.dk1, &r.dv1, &r.dk2, &r.dv2}) test::poison(*t);
  switch (how) {
    case Via::list:
      attn_bwd_work_list(q, k1, v1, k2, v2, d_out, lse, delta, r.dq, r.dk1, r.dv1, r.dk2, r.dv2, mask, *list);
      break;
    case Via::two_kv:
      attn_bwd_block_fresh_two_kv(q, k1, v1, k2, v2, d_out, lse, delta, r.dq, r.dk1, r.dv1, r.dk2, r.dv2, mask);
      break;
    case Via::list_one_source:
      attn_bwd_work_list(q, k1, v1, Tensor{}, Tensor{}, d_out, lse, delta, r.dq, r.dk1, r.dv1, Tensor{}, Tensor{},
                         mask, *list);
      break;
    case Via::fresh_one_source:
      attn_bwd_block_fresh(q, k1, v1, d_out, lse, delta, r.dq, r.dk1, r.dv1, mask);
      break;
  }
  return r;
}

void expect_same_bits(const test::HostTensor& a, const test::HostTensor& b, const char* what) {
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(std::memcmp(a.f(), b.f(), size_t(a.numel()) * 4), 0) << what << " differs from the reference op's bits";
}

void expect_matches(const test::TwoKvCase& c, const char* what) {
  SCOPED_TRACE(what);
  const AttnBwdWorkList list = doc_bwd_work_list(inputs_of(c));
  ASSERT_GT(list.tasks.size(), 0u);
  const test::HostTensor words = words_tensor(attn_work_list_words(list));
  const std::vector<float> dout = random_dout(c, 5);
  const test::TwoKvGrads g = test::two_kv_grads(c, dout);
  const Grads got = run(c, dout, g.lse, g.delta, &words, Via::list, c.mask());
  const Grads ref = run(c, dout, g.lse, g.delta, nullptr, Via::two_kv, c.mask());
  for (const test::HostTensor* t : {&got.dq, &got.dk1, &got.dv1, &got.dk2, &got.dv2}) EXPECT_FALSE(test::any_nan(*t));
  EXPECT_LT(test::rel_err(test::minus(got.dq, got.dq_start), g.dq), 1e-5);
  EXPECT_LT(test::rel_err(got.dk1, g.dk1), 1e-5);
  EXPECT_LT(test::rel_err(got.dv1, g.dv1), 1e-5);
  EXPECT_LT(test::rel_err(got.dk2, g.dk2), 1e-5);
  EXPECT_LT(test::rel_err(got.dv2, g.dv2), 1e-5);
  expect_same_bits(got.dq, ref.dq, "dq_acc");
  expect_same_bits(got.dk1, ref.dk1, "dk");
  expect_same_bits(got.dv1, ref.dv1, "dv");
  expect_same_bits(got.dk2, ref.dk2, "dk2");
  expect_same_bits(got.dv2, ref.dv2, "dv2");

  // The list's order is the device's; the host runs the same tasks in key order, so a shuffled list gives the same
  // bits.
  AttnBwdWorkList shuffled = list;
  std::shuffle(shuffled.tasks.begin(), shuffled.tasks.end(), std::mt19937_64(17));
  const test::HostTensor shuffled_words = words_tensor(attn_work_list_words(shuffled));
  const Grads again = run(c, dout, g.lse, g.delta, &shuffled_words, Via::list, c.mask());
  expect_same_bits(again.dq, got.dq, "dq_acc (shuffled list)");
  expect_same_bits(again.dk1, got.dk1, "dk (shuffled list)");
  expect_same_bits(again.dv2, got.dv2, "dv2 (shuffled list)");
}

TEST(AttnBwdWorkListCpu, EqualsFp64AndTwoKvBitwise) {
  {  // n = 230 + 190 = 420 own rows (gap to 512), random odd documents, two samples, GQA; source 2 padded with 300
     // rows no query sees (whole key tiles with no segment: dK / dV must be written as zero).
    test::TwoKvCase c = test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 73, bf16_round);
    test::pad_second_source(c, 300, 7, bf16_round);
    expect_matches(c, "odd lengths, padded source 2");
    const Grads got = [&] {
      const std::vector<float> dout = random_dout(c, 5);
      const test::TwoKvGrads g = test::two_kv_grads(c, dout);
      const test::HostTensor w = words_tensor(attn_work_list_words(doc_bwd_work_list(inputs_of(c))));
      return run(c, dout, g.lse, g.delta, &w, Via::list, c.mask());
    }();
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t e = (b * c.R + c.R - 300) * c.Hkv * c.D; e < (b + 1) * c.R * c.Hkv * c.D; ++e) {
        ASSERT_EQ(got.dk2[e], 0.f) << "sample " << b << " element " << e;
        ASSERT_EQ(got.dv2[e], 0.f) << "sample " << b << " element " << e;
      }
  }
  // Documents of length 1: every row sees only itself; gathered rows nobody sees.
  expect_matches(test::make_two_kv_case(2, 4, 2, 16, 900, 0, 300, 500, 640, 8, bf16_round,
                                        std::vector<int64_t>(900, 1), 2),
                 "length 1");
  // One document across everything.
  expect_matches(test::make_two_kv_case(2, 4, 2, 16, 1500, 200, 455, 1000, 1129, 9, bf16_round, {1500}),
                 "one document");
  {  // Short documents: key tiles seen by several query tiles each, tiles holding several documents.
    std::mt19937_64 rng(5);
    std::vector<int64_t> lens;
    for (int64_t p = 0; p < 2000; p += lens.back()) lens.push_back(1 + int64_t(rng() % 90));
    expect_matches(test::make_two_kv_case(2, 4, 2, 16, 2000, 100, 611, 1300, 1517, 3, bf16_round, lens),
                   "short documents");
  }
}

TEST(AttnBwdWorkListCpu, OneSourceEqualsFp64AndFreshBitwise) {
  const test::TwoKvCase c = test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 71, bf16_round);
  DocWorkListInputs in = inputs_of(c);
  in.list_rows = c.n;  // own keys only; the positions keep the case's stride
  in.k_stride = c.list;
  const AttnBwdWorkList list = doc_bwd_work_list(in);
  for (const AttnQuerySeg& s : list.segs) ASSERT_EQ(s.source, -1);
  const test::HostTensor words = words_tensor(attn_work_list_words(list));
  const std::vector<float> dout = random_dout(c, 6);
  const AttnMask own = c.mask();
  const test::AttnShape shape{c.B, c.n, c.n, c.H, c.Hkv, c.D};
  std::vector<double> out, lse, dq, dk, dv;
  test::attention_forward_ref(shape, c.q.data(), c.k1.data(), c.v1.data(), own, out, lse);
  std::vector<double> delta(size_t(c.B * c.H * c.n), 0.0);  // (B, H, n) rowsum(dout * out)
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.n; ++i)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t d = 0; d < c.D; ++d) {
          const size_t e = size_t(((b * c.n + i) * c.H + h) * c.D + d);
          delta[size_t((b * c.H + h) * c.n + i)] += double(dout[e]) * out[e];
        }
  test::attention_backward_ref(shape, c.q.data(), c.k1.data(), c.v1.data(), dout.data(), lse.data(), delta.data(),
                               own, dq, dk, dv);
  const Grads got = run(c, dout, lse, delta, &words, Via::list_one_source, own);
  const Grads ref = run(c, dout, lse, delta, nullptr, Via::fresh_one_source, own);
  for (const test::HostTensor* t : {&got.dq, &got.dk1, &got.dv1}) EXPECT_FALSE(test::any_nan(*t));
  EXPECT_LT(test::rel_err(test::minus(got.dq, got.dq_start), dq), 1e-5);
  EXPECT_LT(test::rel_err(got.dk1, dk), 1e-5);
  EXPECT_LT(test::rel_err(got.dv1, dv), 1e-5);
  expect_same_bits(got.dq, ref.dq, "dq_acc");
  expect_same_bits(got.dk1, ref.dk1, "dk");
  expect_same_bits(got.dv1, ref.dv1, "dv");
}

TEST(AttnBwdWorkListCpu, RefusesListsItCannotRun) {
  const test::TwoKvCase c = test::make_two_kv_case(1, 2, 1, 16, 600, 100, 180, 300, 340, 5, bf16_round);
  const std::vector<float> dout = random_dout(c, 3);
  const test::TwoKvGrads g = test::two_kv_grads(c, dout);
  const AttnBwdWorkList good = doc_bwd_work_list(inputs_of(c));
  const auto run_list = [&](const std::vector<int32_t>& w, Via how = Via::list) {
    const test::HostTensor t = words_tensor(w);
    run(c, dout, g.lse, g.delta, &t, how, c.mask());
  };
  EXPECT_NO_THROW(run_list(attn_work_list_words(good)));
  EXPECT_THROW(run_list(attn_work_list_words(doc_work_list(inputs_of(c)))), Error) << "the forward's list";
  AttnBwdWorkList split = good;
  split.tasks[0].parts = 2;
  EXPECT_THROW(run_list(attn_work_list_words(split)), Error);
  AttnBwdWorkList twice = good;  // a key tile twice: its dK / dV would be added twice
  twice.tasks.push_back(twice.tasks[0]);
  EXPECT_THROW(run_list(attn_work_list_words(twice)), Error);
  AttnBwdWorkList past = good;  // a segment past the query tiles
  ASSERT_GT(past.tasks[0].segs, 0);
  past.segs[size_t(past.tasks[0].first_seg)].tiles = 100;
  EXPECT_THROW(run_list(attn_work_list_words(past)), Error);
  bool has_gathered = false;  // a gathered tile with no second source
  for (const AttnQuerySeg& s : good.segs) has_gathered |= s.source == 0;
  ASSERT_TRUE(has_gathered) << "the case must have gathered tiles";
  EXPECT_THROW(run_list(attn_work_list_words(good), Via::list_one_source), Error);
  const test::HostTensor f = test::f32({4});  // the words as f32: refused
  EXPECT_THROW(run(c, dout, g.lse, g.delta, &f, Via::list, c.mask()), Error);
}

}  // namespace
}  // namespace rt
