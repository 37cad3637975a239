// attn_fwd_work_list on CUDA over lists with split tasks (kernels/attn_work_list.h "Splits";
// kernels/cuda/attention/attn_fwd_work_list_split.cuh: each part stores its state into the split scratch, the last
// part of a tile's 16-row group merges them in part order). Lists from doc_work_list with forced splits (2, 3 and 8
// parts, parts of one tile or more) over the positions as the device holds them (kBase added, so the list's bounds
// are the device's). Cases from tests/unit/kernels/two_kv_case.h: B = 2, GQA (H = 4, Hkv = 2) and H = Hkv, D = 128
// and 64, random documents (some of length 1), one document across every rank, one key source. Checks, with out,
// lse and the split state NaN-poisoned first and the counters zeroed once:
//   * out within 1e-2 relative and lse within 1e-4 of the fp64 attention, no NaN;
//   * against the unsplit list's result: lse within 1e-5 (absolute; f32), out within 5e-3 relative (a part's own
//     running max rounds P to bf16 differently before P V, as any other tiling would) and no less accurate against
//     fp64 (within 1.25x the unsplit list's error);
//   * bitwise equal run to run (three runs, no memset between: the merging part resets the counters) and with the
//     list's tasks in reverse order (another part lands last); the counters are zero after each call;
//   * refusals: a list with merge slots and no split scratch, a scratch too small, and (RT_ATTN_WORK_LIST_CHECK=1) a
//     split list passed without its merge-slot count.
// Skips without a CUDA device (or without fwd v5: a device other than compute capability 9.0).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "parallel/schedule/doc_work_list.h"
#include "tests/gpu/attention_test_util.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"
#include "tests/unit/test_reference.h"

namespace rt::test {
namespace {

#define RT_REQUIRE_FWD_V5(D)                                                                                  \
  do {                                                                                                        \
    RT_REQUIRE_CUDA();                                                                                        \
    if (!cuda::attn_fwd_ws_supported(0, D)) GTEST_SKIP() << "fwd v5 needs compute capability 9.0 (sm_90a)"; \
  } while (0)

// The builder's inputs as the device's positions (+ kBase): one source uses the own keys only.
DocWorkListInputs device_inputs(const TwoKvCase& c, bool two_sources) {
  DocWorkListInputs in;
  in.B = c.B, in.Nq = c.n, in.Nk = c.n;
  in.list_rows = two_sources ? c.list : c.n;
  in.q_stride = c.n, in.k_stride = c.list;
  for (int64_t p : c.q_pos) in.q_pos.push_back(p + kBase);
  for (int64_t p : c.q_doc) in.q_doc_start.push_back(p + kBase);
  for (int64_t p : c.k_pos) in.k_pos.push_back(p + kBase);
  return in;
}

struct Got {
  std::vector<float> out, lse;  // (B, n, H, D), (B, H, n)
};

std::vector<int32_t> download_i32(const Tensor& src) {
  std::vector<int32_t> out(static_cast<size_t>(src.numel()));
  copy_cast(Tensor(out.data(), DType::i32, Device::cpu(), {src.numel()}), src);
  return out;
}

// The split scratch of a list on the device: state NaN-poisoned (the parts write it before the merge reads it),
// counters zeroed once.
struct SplitScratch {
  Buffer state, count;
  int64_t slots;
  SplitScratch(const TwoKvCase& c, int64_t slots_)
      : state(gpu(), DType::f32, {std::max<int64_t>(slots_, 1), c.H, kAttnWorkTileRows, c.D + 2}),
        count(gpu(), DType::i32, {std::max<int64_t>(slots_, 1), c.H, kAttnWorkRowGroups}), slots(slots_) {
    poison(state.t());
    upload_i32(count.t(), std::vector<int32_t>(size_t(count.t().numel()), 0));
  }
  AttnSplitScratch arg() const { return AttnSplitScratch{state.t(), count.t(), slots}; }
};

// One call over `list` (two sources: k2 / v2; else the own keys alone), out and lse poisoned first.
Got run(const TwoKvCase& c, const DeviceCase& d, bool two_sources, const AttnWorkList& list,
        const AttnSplitScratch& split) {
  const std::vector<int32_t> words = attn_work_list_words(list);
  Buffer wl(gpu(), DType::i32, {int64_t(words.size())});
  upload_i32(wl.t(), words);
  Buffer acc(gpu(), DType::f32, {c.B, c.H, c.n, c.D}), m(gpu(), DType::f32, {c.B, c.H, c.n}),
      l(gpu(), DType::f32, {c.B, c.H, c.n}), out(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}),
      lse(gpu(), DType::f32, {c.B, c.H, c.n});
  poison(out.t());
  poison(lse.t());
  AttnState st{acc.t(), m.t(), l.t()};
  attn_fwd_work_list(d.q.t(), d.k1.t(), d.v1.t(), two_sources ? d.k2.t() : Tensor(), two_sources ? d.v2.t() : Tensor(),
                     st, d.mask, wl.t(), int64_t(list.tasks.size()), out.t(), lse.t(), split);
  return Got{download(out.t()), download(lse.t())};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The largest distance in bf16 ulps between two vectors of bf16 values (as f32); NaN: a huge number.
void check_case(const TwoKvCase& c, bool two_sources, const char* what) {
  SCOPED_TRACE(what);
  const auto d = to_device(c);
  const DocWorkListInputs in = device_inputs(c, two_sources);
  const AttnWorkList whole = doc_work_list(in);
  ASSERT_FALSE(whole.tasks.empty());
  const Got unsplit = run(c, *d, two_sources, whole, AttnSplitScratch{});
  std::vector<double> ref_out, ref_lse;
  const int64_t rows = two_sources ? c.list : c.n;
  attention_forward_ref({c.B, c.n, rows, c.H, c.Hkv, c.D}, c.q.data(), two_sources ? c.k_list.data() : c.k1.data(),
                        two_sources ? c.v_list.data() : c.v1.data(), c.mask(), ref_out, ref_lse);
  const std::vector<float> out_f(ref_out.begin(), ref_out.end()), lse_f(ref_lse.begin(), ref_lse.end());
  int split_lists = 0;
  for (int64_t parts : {2, 3, 8}) {
    SCOPED_TRACE(std::to_string(parts) + " parts");
    const AttnWorkList list = doc_work_list(in, forced_split(parts, 1 << 12));
    ASSERT_EQ(doc_work_list_problem(list, in), "");
    if (list.merge_slots == 0) continue;
    ++split_lists;
    const SplitScratch scratch(c, list.merge_slots);
    const Got got = run(c, *d, two_sources, list, scratch.arg());
    EXPECT_LT(rel_error(got.out, out_f), 1e-2) << "fp64: " << worst_mismatch(got.out, out_f);
    EXPECT_LT(lse_max_abs_error(got.lse, lse_f), 1e-4) << "fp64";
    EXPECT_LT(lse_max_abs_error(got.lse, unsplit.lse), 1e-5) << "lse against the unsplit list";
    // A part runs its online softmax from its own running max, so P's bf16 rounding before P V differs from the
    // unsplit tile's (as between any two flash tilings): the H200 measured 6e-4 to 2.1e-3 RMS between the two, several
    // bf16 ulps on small elements. So: close to the unsplit list, and no less accurate than it against fp64. A lost or
    // doubled part is O(1e-1) off both.
    EXPECT_LT(rel_error(got.out, unsplit.out), 5e-3) << "out against the unsplit list";
    EXPECT_LE(rel_error(got.out, out_f), 1.25 * rel_error(unsplit.out, out_f) + 1e-4)
        << "the split list is less accurate than the unsplit one against fp64";
    for (int32_t x : download_i32(scratch.count.t())) ASSERT_EQ(x, 0) << "a counter left non-zero";
    for (int rep = 0; rep < 2; ++rep) {  // no memset between calls
      const Got again = run(c, *d, two_sources, list, scratch.arg());
      EXPECT_TRUE(same_bits(got.out, again.out) && same_bits(got.lse, again.lse)) << "run " << rep + 2 << " differs";
    }
    AttnWorkList reversed = list;  // the tasks in reverse order: other parts land last
    std::reverse(reversed.tasks.begin(), reversed.tasks.end());
    for (size_t k = 0; k < list.tasks.size(); ++k)
      std::copy(list.rows.begin() + std::ptrdiff_t(k * kAttnWorkRowGroups),
                list.rows.begin() + std::ptrdiff_t((k + 1) * kAttnWorkRowGroups),
                reversed.rows.begin() + std::ptrdiff_t((list.tasks.size() - 1 - k) * kAttnWorkRowGroups));
    const Got rev = run(c, *d, two_sources, reversed, scratch.arg());
    EXPECT_TRUE(same_bits(got.out, rev.out) && same_bits(got.lse, rev.lse)) << "the tasks' order changed bits";
    for (int32_t x : download_i32(scratch.count.t())) ASSERT_EQ(x, 0) << "a counter left non-zero";
  }
  EXPECT_GT(split_lists, 0) << "no tile long enough to split";
}

// Own rows [300, 700) and [1200, 1500) of 2100 positions: n = 700 (a 68-row gap before source 2).
TwoKvCase random_docs(int64_t H, int64_t Hkv, int64_t D, uint64_t seed) {
  return make_two_kv_case(2, H, Hkv, D, 2100, 300, 700, 1200, 1500, seed, round_bf16);
}

TEST(AttnWorkListSplitCuda, TwoSourcesD128Gqa) {
  RT_REQUIRE_FWD_V5(128);
  check_case(random_docs(4, 2, 128, 17), true, "random documents");
}

TEST(AttnWorkListSplitCuda, OneDocumentAcrossEveryRankD128) {
  RT_REQUIRE_FWD_V5(128);
  check_case(make_two_kv_case(2, 4, 2, 128, 2100, 300, 700, 1200, 1500, 31, round_bf16, {2100}, 0), true,
             "one document");
}

TEST(AttnWorkListSplitCuda, TwoSourcesD64HeqHkv) {
  RT_REQUIRE_FWD_V5(64);
  check_case(random_docs(2, 2, 64, 29), true, "random documents, D 64");
}

TEST(AttnWorkListSplitCuda, OneSourceOddLengthsD128) {
  RT_REQUIRE_FWD_V5(128);
  std::vector<int64_t> lengths;  // odd lengths
  for (int64_t p = 0, i = 0; p < 2501; ++i) {
    const int64_t len = std::min<int64_t>(2501 - p, 2 * ((i * 37) % 150) + 1);
    lengths.push_back(len);
    p += len;
  }
  check_case(make_two_kv_case(2, 4, 2, 128, 2501, 101, 434, 1777, 2196, 41, round_bf16, lengths, 8), false,
             "one source, odd lengths");
}

TEST(AttnWorkListSplitCuda, RefusesASplitListWithoutItsScratch) {
  RT_REQUIRE_FWD_V5(128);
  const TwoKvCase c = make_two_kv_case(2, 4, 2, 128, 2100, 300, 700, 1200, 1500, 31, round_bf16, {2100}, 0);
  const auto d = to_device(c);
  const AttnWorkList list = doc_work_list(device_inputs(c, true), forced_split(3, 1 << 12));
  ASSERT_GT(list.merge_slots, 0);
  auto refused = [&](const AttnSplitScratch& split, const char* says) {
    try {
      run(c, *d, true, list, split);
      ADD_FAILURE() << "accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  {
    SCOPED_TRACE("slots and no scratch");
    AttnSplitScratch none;
    none.slots = list.merge_slots;
    refused(none, "no split scratch");
  }
  {
    SCOPED_TRACE("a scratch one slot short");
    const SplitScratch small(c, list.merge_slots - 1);
    AttnSplitScratch arg = small.arg();
    arg.slots = list.merge_slots;
    refused(arg, "must be at least");
  }
  {
    SCOPED_TRACE("the unsplit overload, host check on");
    ::setenv("RT_ATTN_WORK_LIST_CHECK", "1", 1);
    refused(AttnSplitScratch{}, "merge slots");
    ::unsetenv("RT_ATTN_WORK_LIST_CHECK");
  }
  {
    SCOPED_TRACE("the host check passes a good split list");
    ::setenv("RT_ATTN_WORK_LIST_CHECK", "1", 1);
    const SplitScratch scratch(c, list.merge_slots);
    EXPECT_NO_THROW(run(c, *d, true, list, scratch.arg()));
    ::unsetenv("RT_ATTN_WORK_LIST_CHECK");
  }
}

}  // namespace
}  // namespace rt::test
