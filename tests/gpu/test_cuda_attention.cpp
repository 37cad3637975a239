// CUDA flash attention against the CPU version (rt::cpu through the dispatcher, fp32 throughout) running
// the same sequence of calls: state reset, one or more resumable forward blocks, finalize, delta, and the
// backward blocks accumulating into pre-filled dq/dk/dv. Inputs are bf16-rounded on the host so both sides
// see the same values. Tolerances: out (bf16 output, P rounded to bf16 before PV) 1e-2 relative; lse 1e-4
// absolute (natural log, f32 sums); dq/dk/dv (bf16 P and dS in the mma) 1e-2 relative. Measured on an
// H200 (2026-11-29): out 1.8e-3..2.0e-3, lse <= 2e-6, dq/dk/dv 1.5e-3..2.2e-3.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>

#include "tests/gpu/attention_test_util.h"

namespace rt::test {
namespace {

struct AttnCase {
  const char* name;
  int64_t B, Nq, Nk, H, Hkv;
  std::vector<AttnMask> blocks;  // applied in order, forward then backward
};

struct GpuGrads {
  std::vector<float> dq, dk, dv;  // (B,Nq,H,D), (B,Nk,Hkv,D) x2, f32
};

// Runs `c` on the GPU and on the CPU, checks every output, and returns the GPU gradients.
GpuGrads run_case(const AttnCase& c, int64_t D, uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + " D=" + std::to_string(D));
  const int64_t B = c.B, Nq = c.Nq, Nk = c.Nk, H = c.H, Hkv = c.Hkv;
  const int64_t nq = B * Nq * H * D, nk = B * Nk * Hkv * D, nrow = B * H * Nq;
  std::vector<float> q = bf16_rounded(random_vector(nq, seed, 1.2f)), k = bf16_rounded(random_vector(nk, seed + 1, 1.2f));
  std::vector<float> v = bf16_rounded(random_vector(nk, seed + 2)), dout = bf16_rounded(random_vector(nq, seed + 3));
  std::vector<float> dq0 = random_vector(nq, seed + 4, 0.1f), dk0 = random_vector(nk, seed + 5, 0.1f),
                     dv0 = random_vector(nk, seed + 6, 0.1f);

  // CPU reference, f32.
  std::vector<float> acc(static_cast<size_t>(nq)), m(static_cast<size_t>(nrow)), l(static_cast<size_t>(nrow)), out(static_cast<size_t>(nq)), lse(static_cast<size_t>(nrow)),
      delta(static_cast<size_t>(nrow)), dq = dq0, dk = dk0, dv = dv0;
  {
    AttnState st{host_view(acc, {B, H, Nq, D}), host_view(m, {B, H, Nq}), host_view(l, {B, H, Nq})};
    attn_state_reset(st);
    for (const AttnMask& mk : c.blocks)
      attn_fwd_block(host_view(q, {B, Nq, H, D}), host_view(k, {B, Nk, Hkv, D}), host_view(v, {B, Nk, Hkv, D}), st, mk);
    attn_fwd_finalize(st, host_view(out, {B, Nq, H, D}), host_view(lse, {B, H, Nq}));
    attn_bwd_delta(host_view(out, {B, Nq, H, D}), host_view(dout, {B, Nq, H, D}), host_view(delta, {B, H, Nq}));
    for (const AttnMask& mk : c.blocks)
      attn_bwd_block(host_view(q, {B, Nq, H, D}), host_view(k, {B, Nk, Hkv, D}), host_view(v, {B, Nk, Hkv, D}),
                     host_view(dout, {B, Nq, H, D}), host_view(lse, {B, H, Nq}), host_view(delta, {B, H, Nq}),
                     host_view(dq, {B, Nq, H, D}), host_view(dk, {B, Nk, Hkv, D}), host_view(dv, {B, Nk, Hkv, D}), mk);
  }

  // GPU.
  Buffer gq(gpu(), DType::bf16, {B, Nq, H, D}), gk(gpu(), DType::bf16, {B, Nk, Hkv, D}), gv(gpu(), DType::bf16, {B, Nk, Hkv, D});
  Buffer gdo(gpu(), DType::bf16, {B, Nq, H, D}), gout(gpu(), DType::bf16, {B, Nq, H, D});
  Buffer gacc(gpu(), DType::f32, {B, H, Nq, D}), gm(gpu(), DType::f32, {B, H, Nq}), gl(gpu(), DType::f32, {B, H, Nq});
  Buffer glse(gpu(), DType::f32, {B, H, Nq}), gdelta(gpu(), DType::f32, {B, H, Nq});
  Buffer gdq(gpu(), DType::f32, {B, Nq, H, D}), gdk(gpu(), DType::f32, {B, Nk, Hkv, D}), gdv(gpu(), DType::f32, {B, Nk, Hkv, D});
  upload(gq, q); upload(gk, k); upload(gv, v); upload(gdo, dout);
  upload(gdq, dq0); upload(gdk, dk0); upload(gdv, dv0);
  poison(gacc); poison(gm); poison(gl); poison(gout); poison(glse); poison(gdelta);
  AttnState st{gacc.t(), gm.t(), gl.t()};
  attn_state_reset(st);
  for (const AttnMask& mk : c.blocks) attn_fwd_block(gq.t(), gk.t(), gv.t(), st, mk);
  attn_fwd_finalize(st, gout.t(), glse.t());
  attn_bwd_delta(gout.t(), gdo.t(), gdelta.t());
  for (const AttnMask& mk : c.blocks)
    attn_bwd_block(gq.t(), gk.t(), gv.t(), gdo.t(), glse.t(), gdelta.t(), gdq.t(), gdk.t(), gdv.t(), mk);

  const std::vector<float> o_gpu = download(gout), lse_gpu = download(glse);
  const double e_out = rel_error(o_gpu, out), e_lse = lse_max_abs_error(lse_gpu, lse);
  GpuGrads grads{download(gdq), download(gdk), download(gdv)};
  const double e_dq = rel_error(grads.dq, dq), e_dk = rel_error(grads.dk, dk), e_dv = rel_error(grads.dv, dv);
  std::cout << "[attn] " << c.name << " D=" << D << " out " << e_out << " lse " << e_lse << " dq " << e_dq << " dk "
            << e_dk << " dv " << e_dv << "\n";
  EXPECT_LE(e_out, 1e-2) << worst_mismatch(o_gpu, out);
  EXPECT_LE(e_lse, 1e-4);
  EXPECT_LE(e_dq, 1e-2);
  EXPECT_LE(e_dk, 1e-2);
  EXPECT_LE(e_dv, 1e-2);
  // Rows with no visible key: LSE = -inf and O = 0 exactly, never NaN.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Nq; ++i)
        if (std::isinf(lse[size_t((b * H + h) * Nq + i)])) {
          for (int64_t d = 0; d < D; ++d) EXPECT_EQ(o_gpu[size_t(((b * Nq + i) * H + h) * D + d)], 0.f);
        }
  return grads;
}

class CudaAttention : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaAttention, NonCausalGqaRaggedLengths) {
  RT_REQUIRE_CUDA();
  run_case({"noncausal_gqa", 2, 200, 200, 4, 2, {mask(false, 0, 0)}}, GetParam(), 1000);
}

TEST_P(CudaAttention, CausalWithOffsetsAndRowsWithoutKeys) {
  RT_REQUIRE_CUDA();
  // k_offset 40: query rows 0..39 see no key (LSE -inf, O 0); later rows see keys j <= i - 40.
  run_case({"causal_empty_rows", 1, 150, 260, 2, 1, {mask(true, 0, 40)}}, GetParam(), 2000);
}

TEST_P(CudaAttention, ResumedForwardOverSeveralBlocks) {
  RT_REQUIRE_CUDA();
  run_case({"resumed_blocks", 1, 300, 300, 4, 1,
            {mask(true, 0, 0, 0, -1, 0, 70), mask(true, 0, 0, 0, -1, 70, 190), mask(true, 0, 0, 0, -1, 190, 300)}},
           GetParam(), 3000);
}

TEST_P(CudaAttention, SubRangesAndOffsets) {
  RT_REQUIRE_CUDA();
  // A zigzag-like mix: a full block on a query/key sub-range, then a causal block with global offsets.
  run_case({"subranges", 2, 256, 192, 2, 2,
            {mask(false, 0, 0, 30, 170, 10, 150), mask(true, 1000, 900, 0, -1, 150, 192),
             mask(true, 64, 100, 5, 250, 0, 130)}},
           GetParam(), 4000);
}

// set_deterministic_attention(true) for one scope.
struct DeterministicScope {
  DeterministicScope() { set_deterministic_attention(true); }
  ~DeterministicScope() { set_deterministic_attention(false); }
};

TEST_P(CudaAttention, DeterministicBackwardIsAccurateAndRepeatsBitwise) {
  RT_REQUIRE_CUDA();
  // 6 key tiles x 12 query tiles per head, two resumed causal blocks and a sub-range block: many CTAs add
  // into the same dQ rows, so float atomics would (almost surely) differ in the last bits between runs.
  const AttnCase c{"deterministic", 1, 768, 768, 4, 2,
                   {mask(true, 0, 0, 0, -1, 0, 384), mask(true, 0, 0, 0, -1, 384, 768),
                    mask(false, 0, 0, 100, 700, 30, 300)}};
  const GpuGrads atomics = run_case(c, GetParam(), 5000);
  DeterministicScope on;
  const GpuGrads first = run_case(c, GetParam(), 5000);  // checks accuracy against the CPU again
  const GpuGrads second = run_case(c, GetParam(), 5000);
  EXPECT_TRUE(first.dq == second.dq) << "deterministic dQ differs between two runs";
  EXPECT_TRUE(first.dk == second.dk);
  EXPECT_TRUE(first.dv == second.dv);
  // Only the order of the f32 dQ additions differs from the atomic kernel.
  EXPECT_LE(rel_error(first.dq, atomics.dq), 1e-5);
  EXPECT_TRUE(first.dk == atomics.dk) << "dK does not depend on the dQ path";
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttention, ::testing::Values(int64_t(64), int64_t(128)),
                         [](const auto& info) { return "D" + std::to_string(info.param); });

// attn_fwd_finalize on its own (the ring finalizes each rank's state after its last step) against the CPU op, for
// both output dtypes, D % 4 == 0 (the vectorized kernel) and not (the per-element one), with rows that saw no key
// (l = 0): out 0 and lse -inf there. Outputs poisoned first.
TEST(CudaAttentionFinalize, MatchesCpuForBothOutputDtypesAndHeadDims) {
  RT_REQUIRE_CUDA();
  const int64_t B = 2, Nq = 37, H = 3;
  for (const int64_t D : {int64_t(128), int64_t(12)}) {
    for (const DType out_dtype : {DType::bf16, DType::f32}) {
      SCOPED_TRACE("D=" + std::to_string(D) + " out " + dtype_name(out_dtype));
      const int64_t nrow = B * H * Nq;
      std::vector<float> acc = random_vector(nrow * D, 7000 + D, 2.f), m = random_vector(nrow, 7100 + D, 3.f);
      std::vector<float> l = random_vector(nrow, 7200 + D, 1.f, 4.f);
      for (int64_t r = 0; r < nrow; r += 5) l[size_t(r)] = 0.f;  // rows that saw no key
      for (float& x : l) x = std::fabs(x);
      std::vector<float> out(static_cast<size_t>(B * Nq * H * D)), lse(static_cast<size_t>(nrow));
      AttnState host{host_view(acc, {B, H, Nq, D}), host_view(m, {B, H, Nq}), host_view(l, {B, H, Nq})};
      RT_CPU_REFERENCE(attn_fwd_finalize(host, host_view(out, {B, Nq, H, D}), host_view(lse, {B, H, Nq})));
      if (out_dtype == DType::bf16) out = bf16_rounded(out);

      Buffer gacc(gpu(), DType::f32, {B, H, Nq, D}), gm(gpu(), DType::f32, {B, H, Nq}), gl(gpu(), DType::f32, {B, H, Nq});
      Buffer gout(gpu(), out_dtype, {B, Nq, H, D}), glse(gpu(), DType::f32, {B, H, Nq});
      upload(gacc.t(), acc);
      upload(gm.t(), m);
      upload(gl.t(), l);
      poison(gout.t());
      poison(glse.t());
      AttnState st{gacc.t(), gm.t(), gl.t()};
      attn_fwd_finalize(st, gout.t(), glse.t());
      const std::vector<float> o = download(gout.t()), lg = download(glse.t());
      ASSERT_FALSE(std::any_of(o.begin(), o.end(), [](float x) { return std::isnan(x); })) << "NaN in out";
      // f32: acc * (1 / l) against acc / l, a few ulps; bf16: at most one bf16 step apart after that.
      EXPECT_LE(rel_error(o, out), out_dtype == DType::f32 ? 1e-6 : 4e-3) << worst_mismatch(o, out);
      for (int64_t r = 0; r < nrow; ++r) {
        if (l[size_t(r)] == 0.f) {
          EXPECT_TRUE(std::isinf(lg[size_t(r)]) && lg[size_t(r)] < 0) << "row " << r << " lse " << lg[size_t(r)];
        } else {
          EXPECT_NEAR(lg[size_t(r)], lse[size_t(r)], 1e-5f) << "row " << r;
        }
      }
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Nq; ++i)
          for (int64_t h = 0; h < H; ++h)
            if (l[size_t((b * H + h) * Nq + i)] == 0.f) {
              for (int64_t d = 0; d < D; ++d) EXPECT_EQ(o[size_t(((b * Nq + i) * H + h) * D + d)], 0.f);
            }
    }
  }
}

TEST(CudaAttentionArgs, UnsupportedHeadDimIsRefused) {
  RT_REQUIRE_CUDA();
  Buffer q(gpu(), DType::bf16, {1, 8, 1, 96}), acc(gpu(), DType::f32, {1, 1, 8, 96}), m(gpu(), DType::f32, {1, 1, 8}),
      l(gpu(), DType::f32, {1, 1, 8});
  AttnState st{acc.t(), m.t(), l.t()};
  EXPECT_THROW(attn_fwd_block(q.t(), q.t(), q.t(), st, AttnMask{}), rt::Error);
}

}  // namespace
}  // namespace rt::test
