// attn_fwd_whole_two_kv on CUDA (kernels/cuda/attention/attn_fwd_fused.cu; fwd v5 reads the two sources as one key
// list): against the fp64 attention over the list (tests/unit/kernels/two_kv_case.h: the gather scheme's own and
// gathered keys, the gap between them masked by position), at d 128 and d 64, GQA, two samples with different
// documents (some of length 1), rows that see keys of one source or of both (the CPU test covers rows that see
// none); and against the op sequence
// it replaces (attn_fwd_block_first over source 1, attn_fwd_block_last over source 2), and with a second source
// under the kernel's 128 rows (the op then runs that sequence). Positions are 64-bit, past 2^32. Inputs fresh random
// bf16 values; out and lse NaN-poisoned first. Bounds: out 1e-2 relative (P is bf16 in the MMA), lse 1e-4 absolute,
// -inf exactly where the reference has it, no NaN. Skips without a CUDA device.
#include <cmath>
#include <memory>

#include "tests/gpu/attention_test_util.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/test_reference.h"

namespace rt::test {
namespace {

struct Got {
  std::vector<float> out, lse;
};

// fused: attn_fwd_whole_two_kv; else the sequence it replaces.
Got run(const TwoKvCase& c, const DeviceCase& d, bool fused) {
  Buffer acc(gpu(), DType::f32, {c.B, c.H, c.n, c.D}), m(gpu(), DType::f32, {c.B, c.H, c.n}),
      l(gpu(), DType::f32, {c.B, c.H, c.n}), out(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}),
      lse(gpu(), DType::f32, {c.B, c.H, c.n});
  poison(acc.t());
  poison(out.t());
  poison(lse.t());
  AttnState st{acc.t(), m.t(), l.t()};
  if (fused) {
    attn_fwd_whole_two_kv(d.q.t(), d.k1.t(), d.v1.t(), d.k2.t(), d.v2.t(), st, d.mask, out.t(), lse.t());
  } else {
    AttnMask second = d.mask;
    second.docs.k_pos += attn_second_kv_row(c.n);
    attn_fwd_block_first(d.q.t(), d.k1.t(), d.v1.t(), st, d.mask);
    attn_fwd_block_last(d.q.t(), d.k2.t(), d.v2.t(), st, second, out.t(), lse.t());
  }
  return Got{download(out.t()), download(lse.t())};
}

void check_against_fp64(const TwoKvCase& c, const Got& got, const char* what) {
  std::vector<double> ref_out, ref_lse;
  attention_forward_ref({c.B, c.n, c.list, c.H, c.Hkv, c.D}, c.q.data(), c.k_list.data(), c.v_list.data(), c.mask(),
                        ref_out, ref_lse);
  std::vector<float> out_f(ref_out.begin(), ref_out.end()), lse_f(ref_lse.begin(), ref_lse.end());
  EXPECT_LT(rel_error(got.out, out_f), 1e-2) << what;
  EXPECT_LT(lse_max_abs_error(got.lse, lse_f), 1e-4) << what;
}

void check_case(const TwoKvCase& c, bool gap = true) {
  if (gap) {
    ASSERT_GT(c.list - c.R, c.n) << "the case must have gap rows";
  }
  const auto d = to_device(c);
  const Got fused = run(c, *d, true), sequence = run(c, *d, false);
  check_against_fp64(c, fused, "attn_fwd_whole_two_kv");
  check_against_fp64(c, sequence, "block_first + block_last");
  EXPECT_LT(rel_error(fused.out, sequence.out), 1e-2);
  EXPECT_LT(lse_max_abs_error(fused.lse, sequence.lse), 1e-4);
}

TEST(AttnFwdTwoKv, D128GqaTwoSamplesMatchFp64AndTheTwoCalls) {
  RT_REQUIRE_CUDA();
  // Own rows [300, 700) and [1200, 1500): n = 700, the gap is 768 - 700 = 68 rows.
  check_case(make_two_kv_case(2, 4, 2, 128, 2100, 300, 700, 1200, 1500, 17, round_bf16));
}

TEST(AttnFwdTwoKv, D64MatchesFp64AndTheTwoCalls) {
  RT_REQUIRE_CUDA();
  check_case(make_two_kv_case(2, 2, 1, 64, 1600, 150, 410, 900, 1090, 29, round_bf16));
}

TEST(AttnFwdTwoKv, ASpanStartingMidTileDoesNotStraddleTheSources) {
  RT_REQUIRE_CUDA();
  // No gap (n = 512), and a query tile whose first visible key is in an odd 64-key block: own rows are positions
  // [1000, 1100) and [1300, 1712); documents [0, 1000), [1000, 1080), [1080, 1800), [1800, 3000). Query tile 1 (rows
  // 128..255, document [1080, 1800)) sees own keys from row 80 and the other ranks' keys [1100, 1300), which are
  // source 2's first rows: its tiles must not run from key 64 in steps of 128 across the sources' edge at 512.
  const TwoKvCase c =
      make_two_kv_case(1, 4, 2, 128, 3000, 1000, 1100, 1300, 1712, 53, round_bf16, {1000, 80, 720, 1200}, 0);
  ASSERT_EQ(c.list, c.n + c.R);
  ASSERT_EQ(c.k_pos[size_t(c.n)], 1100) << "source 2 must start with the document's keys";
  check_case(c, /*gap=*/false);
}

TEST(AttnFwdTwoKv, ASecondSourceUnderOneKeyTileRunsTheSequence) {
  RT_REQUIRE_CUDA();
  // Own rows cover most of the sample, so few rows come from elsewhere (fewer than the kernel's 128-key tile).
  const TwoKvCase c = make_two_kv_case(1, 2, 2, 128, 700, 0, 300, 320, 690, 41, round_bf16);
  ASSERT_TRUE(c.R > 0 && c.R < 128) << c.R;
  const auto d = to_device(c);
  check_against_fp64(c, run(c, *d, true), "attn_fwd_whole_two_kv, short second source");
}

}  // namespace
}  // namespace rt::test
