// attn_bwd_block_fresh_two_kv on CUDA (kernels/cuda/attention/attn_bwd_block_fresh.cu; bwd v5 reads K / V and writes
// dK / dV of each key tile through its source's tensor maps): against the fp64 gradients over the key list
// (tests/unit/kernels/two_kv_case.h: the gather scheme's own and gathered keys, the gap between them masked by
// position), at d 128 and d 64, GQA, two samples with different documents (some of length 1), source 2 ending in key
// tiles no query sees (written as zero); and against the op sequence it replaces (attn_bwd_block_fresh over each
// source): with bwd v5's items whole (AttnVariantOverride::bwd_doc_pieces off) each key tile's dK / dV comes from the
// same query tiles in the same order, so dK / dV are the same bits; with pieces, within fp32 reassociation. Also a
// span starting mid-tile with no gap, and a second source under 128 rows (the op then runs the sequence).
// Inputs fresh random bf16 values; dk / dv / dk2 / dv2 NaN-poisoned, dq_acc starting from random values (the op
// adds). Bounds against fp64: 1e-2 relative (P and dS are bf16 in the MMAs); no NaN. Skips without a CUDA device.
#include <memory>

#include "tests/gpu/attention_test_util.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/test_reference.h"

namespace rt::test {
namespace {

struct Grads {
  std::vector<float> dq, dk1, dv1, dk2, dv2;  // dq: minus its starting values
};

std::vector<float> to_f32(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

std::vector<float> random_values(int64_t count, uint64_t seed) {
  const HostTensor h = random_f32({count}, seed);
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t e = 0; e < count; ++e) v[size_t(e)] = round_bf16(h[e]);
  return v;
}

// fused: attn_bwd_block_fresh_two_kv; else the two attn_bwd_block_fresh calls it replaces.
Grads run(const TwoKvCase& c, const DeviceCase& d, const std::vector<float>& dout, const TwoKvGrads& g, bool fused) {
  Buffer d_out(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}), lse(gpu(), DType::f32, {c.B, c.H, c.n}),
      delta(gpu(), DType::f32, {c.B, c.H, c.n}), dq(gpu(), DType::f32, {c.B, c.n, c.H, c.D}),
      dk1(gpu(), DType::f32, {c.B, c.n, c.Hkv, c.D}), dv1(gpu(), DType::f32, {c.B, c.n, c.Hkv, c.D}),
      dk2(gpu(), DType::f32, {c.B, c.R, c.Hkv, c.D}), dv2(gpu(), DType::f32, {c.B, c.R, c.Hkv, c.D});
  upload(d_out.t(), dout);
  upload(lse.t(), to_f32(g.lse));
  upload(delta.t(), to_f32(g.delta));
  const std::vector<float> dq_start = random_values(c.B * c.n * c.H * c.D, 19);
  upload(dq.t(), dq_start);
  for (Buffer* b : {&dk1, &dv1, &dk2, &dv2}) poison(b->t());
  if (fused) {
    attn_bwd_block_fresh_two_kv(d.q.t(), d.k1.t(), d.v1.t(), d.k2.t(), d.v2.t(), d_out.t(), lse.t(), delta.t(),
                                dq.t(), dk1.t(), dv1.t(), dk2.t(), dv2.t(), d.mask);
  } else {
    AttnMask second = d.mask;
    second.docs.k_pos += attn_second_kv_row(c.n);
    attn_bwd_block_fresh(d.q.t(), d.k1.t(), d.v1.t(), d_out.t(), lse.t(), delta.t(), dq.t(), dk1.t(), dv1.t(),
                         d.mask);
    attn_bwd_block_fresh(d.q.t(), d.k2.t(), d.v2.t(), d_out.t(), lse.t(), delta.t(), dq.t(), dk2.t(), dv2.t(),
                         second);
  }
  Grads r{download(dq.t()), download(dk1.t()), download(dv1.t()), download(dk2.t()), download(dv2.t())};
  for (size_t e = 0; e < r.dq.size(); ++e) r.dq[e] -= dq_start[e];
  return r;
}

void check_against_fp64(const TwoKvGrads& g, const Grads& got, const char* what) {
  for (const auto* x : {&got.dq, &got.dk1, &got.dv1, &got.dk2, &got.dv2})
    for (float e : *x) ASSERT_FALSE(std::isnan(e)) << what << ": NaN";
  EXPECT_LT(rel_error(got.dq, to_f32(g.dq)), 1e-2) << what << ": dQ";
  EXPECT_LT(rel_error(got.dk1, to_f32(g.dk1)), 1e-2) << what << ": dK of source 1";
  EXPECT_LT(rel_error(got.dv1, to_f32(g.dv1)), 1e-2) << what << ": dV of source 1";
  EXPECT_LT(rel_error(got.dk2, to_f32(g.dk2)), 1e-2) << what << ": dK of source 2";
  EXPECT_LT(rel_error(got.dv2, to_f32(g.dv2)), 1e-2) << what << ": dV of source 2";
}

void check_case(const TwoKvCase& c, bool gap = true) {
  if (gap) {
    ASSERT_GT(c.list - c.R, c.n) << "the case must have gap rows";
  }
  const auto d = to_device(c);
  const std::vector<float> dout = random_values(c.B * c.n * c.H * c.D, 23);
  const TwoKvGrads g = two_kv_grads(c, dout);
  const Grads fused = run(c, *d, dout, g, true), sequence = run(c, *d, dout, g, false);
  check_against_fp64(g, fused, "attn_bwd_block_fresh_two_kv");
  check_against_fp64(g, sequence, "two attn_bwd_block_fresh");
  EXPECT_LT(rel_error(fused.dq, sequence.dq), 1e-5);
  EXPECT_LT(rel_error(fused.dk1, sequence.dk1), 1e-5);
  EXPECT_LT(rel_error(fused.dk2, sequence.dk2), 1e-5);
  EXPECT_LT(rel_error(fused.dv2, sequence.dv2), 1e-5);
  // Items whole: each key tile's dK / dV are the same bits as the sequence's.
  ScopedAttnVariant forced(nullptr, "5");
  cuda::AttnVariantOverride whole_items = cuda::attn_variant_override();
  whole_items.bwd_doc_pieces = false;
  cuda::set_attn_variant_override(whole_items);
  const Grads fused_whole = run(c, *d, dout, g, true), sequence_whole = run(c, *d, dout, g, false);
  EXPECT_TRUE(fused_whole.dk1 == sequence_whole.dk1 && fused_whole.dv1 == sequence_whole.dv1)
      << "source 1's dK / dV differ from the sequence's with items whole";
  EXPECT_TRUE(fused_whole.dk2 == sequence_whole.dk2 && fused_whole.dv2 == sequence_whole.dv2)
      << "source 2's dK / dV differ from the sequence's with items whole";
  EXPECT_LT(rel_error(fused_whole.dq, sequence_whole.dq), 1e-5);
}

TEST(AttnBwdTwoKv, D128GqaTwoSamplesMatchFp64AndTheTwoCalls) {
  RT_REQUIRE_CUDA();
  // Own rows [300, 700) and [1200, 1500): n = 700, the gap is 768 - 700 = 68 rows; source 2 ends in 300 rows no
  // query sees (two key tiles whose dK / dV must be stored as zero).
  TwoKvCase c = make_two_kv_case(2, 4, 2, 128, 2100, 300, 700, 1200, 1500, 17, round_bf16);
  pad_second_source(c, 300, 3, round_bf16);
  check_case(c);
}

TEST(AttnBwdTwoKv, D64MatchesFp64AndTheTwoCalls) {
  RT_REQUIRE_CUDA();
  TwoKvCase c = make_two_kv_case(2, 2, 1, 64, 1600, 150, 410, 900, 1090, 29, round_bf16);
  pad_second_source(c, 140, 5, round_bf16);
  check_case(c);
}

TEST(AttnBwdTwoKv, NoGapAndASpanStartingMidTile) {
  RT_REQUIRE_CUDA();
  // The forward's straddling case (test_attn_fwd_two_kv.cpp): n = 512, source 2 starts with the keys a query tile of
  // own rows 128..255 sees after its own keys from row 80.
  const TwoKvCase c =
      make_two_kv_case(1, 4, 2, 128, 3000, 1000, 1100, 1300, 1712, 53, round_bf16, {1000, 80, 720, 1200}, 0);
  ASSERT_EQ(c.list, c.n + c.R);
  check_case(c, /*gap=*/false);
}

TEST(AttnBwdTwoKv, ASecondSourceUnderOneKeyTileRunsTheSequence) {
  RT_REQUIRE_CUDA();
  const TwoKvCase c = make_two_kv_case(1, 2, 2, 128, 700, 0, 300, 320, 690, 41, round_bf16);
  ASSERT_TRUE(c.R > 0 && c.R < 128) << c.R;
  const auto d = to_device(c);
  const std::vector<float> dout = random_values(c.B * c.n * c.H * c.D, 31);
  const TwoKvGrads g = two_kv_grads(c, dout);
  check_against_fp64(g, run(c, *d, dout, g, true), "attn_bwd_block_fresh_two_kv, short second source");
}

}  // namespace
}  // namespace rt::test
