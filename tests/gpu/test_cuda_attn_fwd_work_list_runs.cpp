// attn_fwd_work_list_runs (kernels/attn_fwd_work_list_runs.h), which the gather scheme asks before it builds the
// one-launch forward's work list (the default; attn_fwd_whole_two_kv where it says no), against the CUDA kernel:
//   * yes to a two-source call of 700 query rows (tests/gpu/test_cuda_attn_work_list.cpp's shape), which the kernel
//     then runs, its out and lse (NaN-poisoned first) bitwise attn_fwd_whole_two_kv's;
//   * no to a call of 100 query rows, which attn_fwd_work_list refuses, naming the 128 rows it needs;
//   * no to f32, D 96, 127 own or gathered rows, more than kWorkListTilesMax (8192) key tiles; yes on the CPU always.
// Skips without fwd v5 (compute capability 9.0 and an sm_90a build).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attn_fwd_work_list_runs.h"
#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "parallel/schedule/doc_work_list.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"

namespace rt::test {
namespace {

// out (B,n,H,D) bf16 and lse (B,H,n) f32 poisoned, and the state the contract asks for.
struct CallOutputs {
  Buffer acc, m, l, out, lse;
  explicit CallOutputs(const TwoKvCase& c)
      : acc(gpu(), DType::f32, {c.B, c.H, c.n, c.D}), m(gpu(), DType::f32, {c.B, c.H, c.n}),
        l(gpu(), DType::f32, {c.B, c.H, c.n}), out(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}),
        lse(gpu(), DType::f32, {c.B, c.H, c.n}) {
    poison(out.t());
    poison(lse.t());
  }
  AttnState state() const { return AttnState{acc.t(), m.t(), l.t()}; }
};

bool runs(const TwoKvCase& c, DType dtype, int64_t D, int64_t Nq, int64_t Nk, int64_t Nk2) {
  const int64_t list_rows = Nk2 > 0 ? attn_second_kv_row(Nk) + Nk2 : Nk;
  return attn_fwd_work_list_runs(gpu(), dtype, c.B, c.H, D, Nq, Nk, Nk2, list_rows);
}

TEST(AttnFwdWorkListRuns, YesWhereTheKernelRunsNoWhereItRefuses) {
  RT_REQUIRE_CUDA();
  if (!cuda::attn_fwd_ws_supported(0, 128)) GTEST_SKIP() << "fwd v5 needs compute capability 9.0 (sm_90a)";
  // Own rows [300, 700) and [1200, 1500) of 2100 positions: n = 700, two samples, GQA.
  const TwoKvCase c = make_two_kv_case(2, 4, 2, 128, 2100, 300, 700, 1200, 1500, 71, round_bf16);
  ASSERT_GE(c.R, 128) << "the case needs 128 gathered rows";
  ASSERT_TRUE(runs(c, DType::bf16, c.D, c.n, c.n, c.R));
  const auto d = to_device(c);
  DocWorkListInputs in = work_list_inputs_of(c);  // the device's positions: kBase added to every one
  for (std::vector<int64_t>* x : {&in.q_pos, &in.q_doc_start, &in.k_pos})
    for (int64_t& p : *x) p += kBase;
  const AttnWorkList list = doc_work_list(in);
  const std::vector<int32_t> words = attn_work_list_words(list);
  Buffer wl(gpu(), DType::i32, {int64_t(words.size())});  // (words) i32
  upload_i32(wl.t(), words);
  CallOutputs with_list(c), two_kv(c);
  AttnState st_list = with_list.state(), st_two = two_kv.state();
  attn_fwd_work_list(d->q.t(), d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), st_list, d->mask, wl.t(),
                     int64_t(list.tasks.size()), with_list.out.t(), with_list.lse.t());
  attn_fwd_whole_two_kv(d->q.t(), d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), st_two, d->mask, two_kv.out.t(),
                        two_kv.lse.t());
  const std::vector<float> out_a = download(with_list.out.t()), out_b = download(two_kv.out.t());
  const std::vector<float> lse_a = download(with_list.lse.t()), lse_b = download(two_kv.lse.t());
  size_t finite = 0;
  for (float x : out_a) finite += std::isfinite(x) ? 1 : 0;
  EXPECT_EQ(finite, out_a.size()) << "out holds NaN (poison left, or computed)";
  EXPECT_EQ(std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float)), 0) << "out differs from two_kv's";
  EXPECT_EQ(std::memcmp(lse_a.data(), lse_b.data(), lse_a.size() * sizeof(float)), 0) << "lse differs from two_kv's";

  // 100 query rows: no, and the kernel refuses the call (before it reads the list).
  const TwoKvCase small = make_two_kv_case(1, 4, 2, 128, 2100, 300, 350, 1200, 1250, 72, round_bf16);
  ASSERT_EQ(small.n, 100);
  ASSERT_GT(small.R, 0) << "the case needs gathered rows (two sources)";
  EXPECT_FALSE(runs(small, DType::bf16, small.D, small.n, small.n, std::max<int64_t>(small.R, 128)));
  const auto ds = to_device(small);
  Buffer dummy(gpu(), DType::i32, {4});  // (4) i32: an empty list's header
  upload_i32(dummy.t(), {0, 0, kAttnFwdWorkListTag, 0});
  CallOutputs small_out(small);
  AttnState st_small = small_out.state();
  try {
    attn_fwd_work_list(ds->q.t(), ds->k1.t(), ds->v1.t(), ds->k2.t(), ds->v2.t(), st_small, ds->mask, dummy.t(), 0,
                       small_out.out.t(), small_out.lse.t());
    ADD_FAILURE() << "the kernel ran a call of 100 query rows that attn_fwd_work_list_runs refuses";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("at least 128"), std::string::npos) << e.what();
  }

  EXPECT_TRUE(runs(c, DType::bf16, 64, c.n, c.n, c.R)) << "D 64";
  EXPECT_TRUE(runs(c, DType::bf16, c.D, c.n, c.n, 0)) << "one source";
  EXPECT_TRUE(runs(c, DType::bf16, c.D, 128, 128, 128)) << "the smallest call";
  EXPECT_FALSE(runs(c, DType::f32, c.D, c.n, c.n, c.R)) << "f32";
  EXPECT_FALSE(runs(c, DType::bf16, 96, c.n, c.n, c.R)) << "D 96";
  EXPECT_FALSE(runs(c, DType::bf16, c.D, c.n, 127, c.R)) << "127 own key rows";
  EXPECT_FALSE(runs(c, DType::bf16, c.D, c.n, c.n, 127)) << "127 gathered rows";
  EXPECT_FALSE(runs(c, DType::bf16, c.D, c.n, c.n, int64_t(8192) * 128)) << "more than 8192 key tiles";
  EXPECT_TRUE(attn_fwd_work_list_runs(Device::cpu(), DType::f32, 1, 1, 8, 1, 1, 1, 129)) << "the host op";
}

}  // namespace
}  // namespace rt::test
