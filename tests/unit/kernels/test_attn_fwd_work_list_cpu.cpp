// attn_fwd_work_list on the host (kernels/cpu/attention/attn_fwd_work_list.cpp) over doc_work_list's list
// (parallel/schedule/doc_work_list.h): equal to the fp64 attention over the key list and bit for bit to
// attn_fwd_whole_two_kv (the same tiles in the same order; the tiles it leaves out add nothing), with GQA (H = 4,
// Hkv = 2), B = 2, documents of length 1, one source; outputs and scratch NaN-poisoned first. Rows no task covers get
// out 0, lse -inf. And the refusals: a split task, a segment past its source, a list on the wrong dtype.
#include <gtest/gtest.h>


#include "kernels/attn_work_list.h"
#include "parallel/schedule/doc_work_list.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {

DocWorkListInputs inputs_of(const test::TwoKvCase& c) { return test::work_list_inputs_of(c); }

using test::bf16_round;
using test::host;

struct Out {
  test::HostTensor out, lse;
};

test::HostTensor words_tensor(const AttnWorkList& list) {
  return test::work_list_words_tensor(attn_work_list_words(list));  // (4 + 36 T + 4 K + 2 S) i32
}

// The task count the op is told: the words' own (words[0]) unless `tasks` >= 0.
int64_t tasks_of(const test::HostTensor& list, int64_t tasks) {
  return tasks >= 0 ? tasks : int64_t(static_cast<const int32_t*>(list.t.data)[0]);
}

// two_sources false: k2 / v2 undefined (the list must then name own tiles only).
Out run(const test::TwoKvCase& c, const test::HostTensor& list, bool use_list, bool two_sources = true,
        int64_t tasks = -1) {
  const test::HostTensor q = host(c.q, {c.B, c.n, c.H, c.D}), k1 = host(c.k1, {c.B, c.n, c.Hkv, c.D}),
                         v1 = host(c.v1, {c.B, c.n, c.Hkv, c.D}), k2 = host(c.k2, {c.B, c.R, c.Hkv, c.D}),
                         v2 = host(c.v2, {c.B, c.R, c.Hkv, c.D});
  test::HostTensor acc = test::f32({c.B, c.H, c.n, c.D}), m = test::f32({c.B, c.H, c.n}),
                   l = test::f32({c.B, c.H, c.n});  // scratch, poisoned: the op must reset what it reads
  test::poison(acc), test::poison(m), test::poison(l);
  AttnState scratch{acc.t, m.t, l.t};
  Out r{test::f32({c.B, c.n, c.H, c.D}), test::f32({c.B, c.H, c.n})};  // (B,Nq,H,D), (B,H,Nq)
  test::poison(r.out);
  test::poison(r.lse);
  if (!use_list)
    attn_fwd_whole_two_kv(q, k1, v1, k2, v2, scratch, c.mask(), r.out, r.lse);
  else if (two_sources)
    attn_fwd_work_list(q, k1, v1, k2, v2, scratch, c.mask(), list, tasks_of(list, tasks), r.out, r.lse);
  else
    attn_fwd_work_list(q, k1, v1, Tensor{}, Tensor{}, scratch, c.mask(), list, tasks_of(list, tasks), r.out,
                       r.lse);
  return r;
}

void expect_matches(const test::TwoKvCase& c, const char* what) {
  SCOPED_TRACE(what);
  const AttnWorkList list = doc_work_list(inputs_of(c));
  ASSERT_GT(list.tasks.size(), 0u);
  const test::HostTensor words = words_tensor(list);
  const Out got = run(c, words, true), whole = run(c, words, false);
  std::vector<double> ref_out, ref_lse;
  test::attention_forward_ref({c.B, c.n, c.list, c.H, c.Hkv, c.D}, c.q.data(), c.k_list.data(), c.v_list.data(),
                              c.mask(), ref_out, ref_lse);
  EXPECT_FALSE(test::any_nan(got.out));
  EXPECT_LT(test::rel_err(got.out, ref_out), 1e-5);
  EXPECT_LT(test::lse_err(got.lse, ref_lse), 1e-5);
  EXPECT_EQ(std::memcmp(got.out.f(), whole.out.f(), size_t(got.out.numel()) * 4), 0)
      << "out differs from attn_fwd_whole_two_kv's bits";
  EXPECT_EQ(std::memcmp(got.lse.f(), whole.lse.f(), size_t(got.lse.numel()) * 4), 0)
      << "lse differs from attn_fwd_whole_two_kv's bits";
}

TEST(AttnFwdWorkListCpu, EqualsFp64AndTwoKvBitwise) {
  // n = 230 + 190 = 420 own rows (gap to 512), random odd documents, two samples, GQA.
  expect_matches(test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 71, bf16_round), "odd lengths");
  // Documents of length 1: every row sees only itself; gathered rows nobody sees.
  expect_matches(test::make_two_kv_case(2, 4, 2, 16, 900, 0, 300, 500, 640, 8, bf16_round,
                                        std::vector<int64_t>(900, 1), 2),
                 "length 1");
  // One document across everything.
  expect_matches(test::make_two_kv_case(2, 4, 2, 16, 1500, 200, 455, 1000, 1129, 9, bf16_round, {1500}),
                 "one document");
}

TEST(AttnFwdWorkListCpu, OneSourceEqualsFp64) {
  const test::TwoKvCase c = test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 71, bf16_round);
  DocWorkListInputs in = inputs_of(c);
  in.list_rows = c.n;  // own keys only; the positions keep the case's stride
  in.k_stride = c.list;
  const AttnWorkList list = doc_work_list(in);
  for (const AttnKeySeg& s : list.segs) ASSERT_EQ(s.source, -1);
  const Out got = run(c, words_tensor(list), true, false);
  AttnMask own = c.mask();
  std::vector<double> ref_out, ref_lse;
  test::attention_forward_ref({c.B, c.n, c.n, c.H, c.Hkv, c.D}, c.q.data(), c.k1.data(), c.v1.data(), own, ref_out,
                              ref_lse);
  EXPECT_FALSE(test::any_nan(got.out));
  EXPECT_LT(test::rel_err(got.out, ref_out), 1e-5);
  EXPECT_LT(test::lse_err(got.lse, ref_lse), 1e-5);
}

TEST(AttnFwdWorkListCpu, RowsNoTaskCoversGetZeroAndMinusInfinity) {
  const test::TwoKvCase c = test::make_two_kv_case(1, 2, 1, 16, 900, 100, 380, 500, 600, 5, bf16_round);  // 3 tiles
  AttnWorkList list = doc_work_list(inputs_of(c));
  ASSERT_GE(list.tasks.size(), 1u);
  const AttnWorkTask kept = list.tasks[0];
  list.tasks = {kept};  // every other query tile left out
  list.rows.resize(size_t(kAttnWorkRowGroups));  // the kept task's row bounds
  const Out got = run(c, words_tensor(list), true);
  EXPECT_FALSE(test::any_nan(got.out));
  int empty = 0;
  for (int64_t h = 0; h < c.H; ++h)
    for (int64_t i = 0; i < c.n; ++i) {
      if (i >= kept.q_row && i < kept.q_row + 128) continue;
      ++empty;
      EXPECT_TRUE(std::isinf(got.lse[h * c.n + i]) && got.lse[h * c.n + i] < 0) << "row " << i;
      for (int64_t d = 0; d < c.D; ++d) EXPECT_EQ(got.out[(i * c.H + h) * c.D + d], 0.f) << "row " << i;
    }
  EXPECT_GT(empty, 0);
  const Out none = run(c, words_tensor(AttnWorkList{}), true);
  for (int64_t e = 0; e < none.lse.numel(); ++e) EXPECT_TRUE(std::isinf(none.lse[e]) && none.lse[e] < 0);
  for (int64_t e = 0; e < none.out.numel(); ++e) EXPECT_EQ(none.out[e], 0.f);
}

TEST(AttnFwdWorkListCpu, RefusesListsItCannotRun) {
  const test::TwoKvCase c = test::make_two_kv_case(1, 2, 1, 16, 600, 100, 180, 300, 340, 5, bf16_round);
  const AttnWorkList good = doc_work_list(inputs_of(c));
  EXPECT_NO_THROW(run(c, words_tensor(good), true));
  AttnWorkList split = good;
  split.tasks[0].parts = 2;
  EXPECT_THROW(run(c, words_tensor(split), true), Error);
  AttnWorkList past = good;  // an own segment running into the gathered tiles
  past.segs[size_t(past.tasks[0].first_seg)].tiles = 100;
  EXPECT_THROW(run(c, words_tensor(past), true), Error);
  AttnWorkList gathered = good;  // a gathered segment with no second source
  bool has_gathered = false;
  for (const AttnKeySeg& s : gathered.segs) has_gathered |= s.source == 0;
  ASSERT_TRUE(has_gathered) << "the case must have gathered tiles";
  EXPECT_THROW(run(c, words_tensor(gathered), true, false), Error);
  const test::HostTensor good_words = words_tensor(good);
  EXPECT_THROW(run(c, good_words, true, true, int64_t(good.tasks.size()) + 1), Error) << "a wrong task count";
  AttnWorkList other_call = good;  // key ranges of a call with fewer key tiles
  other_call.keys.pop_back();
  EXPECT_THROW(run(c, words_tensor(other_call), true), Error) << "key ranges of another call";
  test::HostTensor f = test::f32({4});  // the words as f32: refused
  EXPECT_THROW(run(c, f, true), Error);
}

}  // namespace
}  // namespace rt
