// CPU flash attention (kernels/cpu/attn_*.cpp) against the naive fp64 reference of test_reference.h:
// O, LSE, dQ, dK, dV; causal and not; GQA; lengths that are not multiples of the 128x128 tile; offsets;
// sub-ranges; forward and backward resumed over several K/V blocks; rows with no visible key.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cpu/attention/attention_common.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::AttnShape;
using test::HostTensor;
using test::lse_err;

constexpr double kFwdTol = 2e-5;  // fp32 kernel vs fp64 reference, relative norm
constexpr double kBwdTol = 1e-4;

struct Inputs {
  AttnShape s;
  HostTensor q, k, v, dout;
  Inputs(const AttnShape& shape, uint64_t seed)
      : s(shape),
        q(test::random_f32({s.B, s.Nq, s.H, s.D}, seed, -2.f, 2.f)),
        k(test::random_f32({s.B, s.Nk, s.Hkv, s.D}, seed + 1, -2.f, 2.f)),
        v(test::random_f32({s.B, s.Nk, s.Hkv, s.D}, seed + 2)),
        dout(test::random_f32({s.B, s.Nq, s.H, s.D}, seed + 3)) {}
};

struct State {
  HostTensor acc, m, l;
  AttnState st;
  explicit State(const AttnShape& s)
      : acc(test::f32({s.B, s.H, s.Nq, s.D})), m(test::f32({s.B, s.H, s.Nq})), l(test::f32({s.B, s.H, s.Nq})) {
    test::poison(acc);
    test::poison(m);
    test::poison(l);
    st = AttnState{acc.t, m.t, l.t};
    attn_state_reset(st);
  }
};

struct Forward {
  HostTensor out, lse;
};

Forward finalize(const AttnShape& s, const State& state) {
  Forward f{test::f32({s.B, s.Nq, s.H, s.D}), test::f32({s.B, s.H, s.Nq})};
  test::poison(f.out);
  test::poison(f.lse);
  attn_fwd_finalize(state.st, f.out, f.lse);
  return f;
}

Forward forward_one_pass(const Inputs& in, const AttnMask& mask) {
  State state(in.s);
  attn_fwd_block(in.q, in.k, in.v, state.st, mask);
  return finalize(in.s, state);
}

// Gradients: kernel output minus its random starting value (the op accumulates) against the reference.
struct Grads {
  HostTensor dq, dk, dv;
  std::vector<double> dq0, dk0, dv0;  // starting values
  explicit Grads(const AttnShape& s, uint64_t seed)
      : dq(test::random_f32({s.B, s.Nq, s.H, s.D}, seed, -0.1f, 0.1f)),
        dk(test::random_f32({s.B, s.Nk, s.Hkv, s.D}, seed + 1, -0.1f, 0.1f)),
        dv(test::random_f32({s.B, s.Nk, s.Hkv, s.D}, seed + 2, -0.1f, 0.1f)),
        dq0(dq.to_double()),
        dk0(dk.to_double()),
        dv0(dv.to_double()) {}
  static double err(const HostTensor& g, const std::vector<double>& g0, const std::vector<double>& ref) {
    std::vector<float> diff(size_t(g.numel()));
    for (int64_t k = 0; k < g.numel(); ++k) diff[size_t(k)] = float(double(g[k]) - g0[size_t(k)]);
    return test::rel_err(diff.data(), ref.data(), g.numel());
  }
};

struct Case {
  std::string name;
  AttnShape s;
  bool causal;
  int64_t q_offset, k_offset;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

void check_against_reference(const Case& c) {
  Inputs in(c.s, 1234);
  AttnMask mask;
  mask.causal = c.causal;
  mask.q_offset = c.q_offset;
  mask.k_offset = c.k_offset;

  Forward f = forward_one_pass(in, mask);
  std::vector<double> out_ref, lse_ref;
  test::attention_forward_ref(c.s, in.q.f(), in.k.f(), in.v.f(), mask, out_ref, lse_ref);
  ASSERT_FALSE(test::any_nan(f.out)) << "NaN in O";
  ASSERT_FALSE(test::any_nan(f.lse)) << "NaN in LSE";
  EXPECT_LT(test::rel_err(f.out, out_ref), kFwdTol);
  EXPECT_LT(lse_err(f.lse, lse_ref), kFwdTol);

  // delta = rowsum(dO * O)
  HostTensor delta = test::f32({c.s.B, c.s.H, c.s.Nq});
  test::poison(delta);
  attn_bwd_delta(f.out, in.dout, delta);
  std::vector<double> delta_ref(size_t(delta.numel()));
  for (int64_t b = 0; b < c.s.B; ++b)
    for (int64_t i = 0; i < c.s.Nq; ++i)
      for (int64_t h = 0; h < c.s.H; ++h) {
        double acc = 0;
        for (int64_t d = 0; d < c.s.D; ++d) {
          const int64_t o = ((b * c.s.Nq + i) * c.s.H + h) * c.s.D + d;
          acc += out_ref[size_t(o)] * in.dout[o];
        }
        delta_ref[size_t((b * c.s.H + h) * c.s.Nq + i)] = acc;
      }
  EXPECT_LT(test::rel_err(delta, delta_ref), kFwdTol);

  Grads g(c.s, 99);
  attn_bwd_block(in.q, in.k, in.v, in.dout, f.lse, delta, g.dq, g.dk, g.dv, mask);
  std::vector<double> dq_ref, dk_ref, dv_ref;
  test::attention_backward_ref(c.s, in.q.f(), in.k.f(), in.v.f(), in.dout.f(), lse_ref.data(), delta_ref.data(),
                               mask, dq_ref, dk_ref, dv_ref);
  EXPECT_LT(Grads::err(g.dq, g.dq0, dq_ref), kBwdTol);
  EXPECT_LT(Grads::err(g.dk, g.dk0, dk_ref), kBwdTol);
  EXPECT_LT(Grads::err(g.dv, g.dv0, dv_ref), kBwdTol);
}

class AttentionCpu : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCpu, ForwardAndBackwardMatchFp64Reference) { check_against_reference(GetParam()); }

// The baseline x86-64 build of the hot loops (chosen on CPUs without AVX2) gives the same answers.
TEST(AttentionCpuBaselineSimd, MatchesFp64Reference) {
  cpu::force_baseline_simd(true);
  check_against_reference(Case{"causal_gqa", {1, 70, 90, 4, 2, 16}, true, 20, 0});
  check_against_reference(Case{"full_mqa", {2, 33, 65, 2, 1, 24}, false, 0, 0});
  cpu::force_baseline_simd(false);
}

// The vectorised exp2 of the softmax: relative error ~1e-7 over the range the kernels use, and exactly 0
// below -126 (so far-masked scores vanish).
TEST(AttentionCpuExp2, MatchesStdExp2) {
  std::vector<float> x;
  for (float v = -130.f; v <= 1.f; v += 0.0137f) x.push_back(v);
  const std::vector<float> in = x;
  const float shift = 0.25f;
  const double sum = cpu::simd_exp2_sum(x.data(), x.data(), int64_t(x.size()), shift, 1.f);
  double ref_sum = 0, worst = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    const float arg = in[k] - shift;  // the kernel's f32 argument
    if (arg < -126.f) {
      ASSERT_EQ(x[k], 0.f) << "x=" << arg;
      continue;
    }
    const double ref = std::exp2(double(arg));
    ref_sum += ref;
    worst = std::max(worst, std::abs(x[k] - ref) / ref);
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_NEAR(sum, ref_sum, 1e-5 * ref_sum);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionCpu,
    ::testing::Values(Case{"causal_mha_odd_len", {2, 70, 70, 4, 4, 16}, true, 0, 0},
                      Case{"full_gqa_h4_kv2", {1, 100, 130, 4, 2, 32}, false, 0, 0},
                      Case{"causal_mqa_h4_kv1_suffix", {2, 67, 131, 4, 1, 8}, true, 64, 0},
                      Case{"causal_offsets", {1, 65, 97, 2, 2, 64}, true, 100, 30},
                      Case{"causal_some_rows_empty", {1, 70, 50, 4, 2, 16}, true, 0, 40},
                      Case{"full_d128_tiny", {1, 3, 5, 2, 1, 128}, false, 0, 0},
                      Case{"causal_two_tiles_each_way", {1, 150, 270, 2, 1, 16}, true, 120, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Copies rows [j0, j1) of x (B,N,Hx,D) into a new (B, j1-j0, Hx, D) tensor.
HostTensor rows_of(const HostTensor& x, int64_t j0, int64_t j1) {
  const int64_t B = x.t.shape[0], N = x.t.shape[1], row = x.t.shape[2] * x.t.shape[3];
  HostTensor out = test::f32({B, j1 - j0, x.t.shape[2], x.t.shape[3]});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t e = 0; e < row; ++e) out[(b * (j1 - j0) + j - j0) * row + e] = x[(b * N + j) * row + e];
  return out;
}

// Forward resumed over 2..4 separate K/V blocks (with their k_offset) equals one pass over the
// concatenation; the same for the backward, whose dK/dV per block are rows of the one-pass result.
TEST(AttentionCpuResume, BlocksEqualOnePass) {
  const AttnShape s{2, 75, 150, 4, 2, 16};
  Inputs in(s, 77);
  for (bool causal : {false, true}) {
    for (const std::vector<int64_t>& cuts :
         {std::vector<int64_t>{0, 70, 150}, {0, 37, 100, 150}, {0, 1, 64, 129, 150}}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "full") + " blocks=" + std::to_string(cuts.size() - 1));
      AttnMask whole;
      whole.causal = causal;
      whole.q_offset = 75;  // queries are the last 75 of 150 positions
      Forward one = forward_one_pass(in, whole);

      State state(s);
      std::vector<HostTensor> kb, vb;
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        kb.push_back(rows_of(in.k, cuts[c], cuts[c + 1]));
        vb.push_back(rows_of(in.v, cuts[c], cuts[c + 1]));
        AttnMask m = whole;
        m.k_offset = cuts[c];
        attn_fwd_block(in.q, kb.back(), vb.back(), state.st, m);
      }
      Forward resumed = finalize(s, state);
      EXPECT_LT(test::rel_err(resumed.out, one.out.to_double()), 1e-5);
      EXPECT_LT(lse_err(resumed.lse, one.lse.to_double()), 1e-6);

      // Resuming through key sub-ranges of the one tensor is the same computation.
      State ranged(s);
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        AttnMask m = whole;
        m.k_begin = cuts[c];
        m.k_end = cuts[c + 1];
        attn_fwd_block(in.q, in.k, in.v, ranged.st, m);
      }
      Forward by_range = finalize(s, ranged);
      EXPECT_LT(test::rel_err(by_range.out, one.out.to_double()), 1e-5);

      HostTensor delta = test::f32({s.B, s.H, s.Nq});
      attn_bwd_delta(one.out, in.dout, delta);
      HostTensor dq1 = test::f32({s.B, s.Nq, s.H, s.D}), dk1 = test::f32({s.B, s.Nk, s.Hkv, s.D}),
                 dv1 = test::f32({s.B, s.Nk, s.Hkv, s.D});
      attn_bwd_block(in.q, in.k, in.v, in.dout, one.lse, delta, dq1, dk1, dv1, whole);
      HostTensor dq = test::f32({s.B, s.Nq, s.H, s.D});
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        AttnMask m = whole;
        m.k_offset = cuts[c];
        HostTensor dk = test::f32({s.B, cuts[c + 1] - cuts[c], s.Hkv, s.D});
        HostTensor dv = test::f32({s.B, cuts[c + 1] - cuts[c], s.Hkv, s.D});
        attn_bwd_block(in.q, kb[c], vb[c], in.dout, one.lse, delta, dq, dk, dv, m);
        EXPECT_LT(test::rel_err(dk, rows_of(dk1, cuts[c], cuts[c + 1]).to_double()), 1e-5);
        EXPECT_LT(test::rel_err(dv, rows_of(dv1, cuts[c], cuts[c + 1]).to_double()), 1e-5);
      }
      EXPECT_LT(test::rel_err(dq, dq1.to_double()), 1e-5);
    }
  }
}

// attn_fwd_whole (one block from a fresh state, finalized) gives the reset + block + finalize result bit for
// bit on the host, whatever the scratch state held before (poisoned here).
TEST(AttentionCpuWhole, EqualsResetBlockFinalize) {
  const AttnShape s{2, 75, 150, 4, 2, 16};
  Inputs in(s, 91);
  AttnMask m;
  m.causal = true;
  m.q_offset = 75;
  const Forward seq = forward_one_pass(in, m);
  State scratch(s);
  test::poison(scratch.acc);
  test::poison(scratch.m);
  test::poison(scratch.l);
  Forward whole{test::f32({s.B, s.Nq, s.H, s.D}), test::f32({s.B, s.H, s.Nq})};
  test::poison(whole.out);
  test::poison(whole.lse);
  attn_fwd_whole(in.q, in.k, in.v, scratch.st, m, whole.out, whole.lse);
  EXPECT_EQ(test::rel_err(whole.out, seq.out.to_double()), 0.0);
  EXPECT_EQ(lse_err(whole.lse, seq.lse.to_double()), 0.0);
}

// attn_bwd_block_fresh overwrites dk / dv (poisoned here) with what fill(0) + attn_bwd_block gives, bit for bit,
// rows outside the key range included (zero); dq accumulates the same way.
TEST(AttentionCpuBwdFresh, EqualsFillThenBlock) {
  const AttnShape s{2, 70, 90, 4, 2, 16};
  Inputs in(s, 93);
  AttnMask m;
  m.causal = true;
  m.q_offset = 30;
  m.k_begin = 5;
  m.k_end = 80;
  const Forward f = forward_one_pass(in, m);
  HostTensor delta = test::f32({s.B, s.H, s.Nq});
  attn_bwd_delta(f.out, in.dout, delta);
  Grads seq(s, 94), fresh(s, 94);
  fill(seq.dk, 0.f);
  fill(seq.dv, 0.f);
  attn_bwd_block(in.q, in.k, in.v, in.dout, f.lse, delta, seq.dq, seq.dk, seq.dv, m);
  test::poison(fresh.dk);
  test::poison(fresh.dv);
  attn_bwd_block_fresh(in.q, in.k, in.v, in.dout, f.lse, delta, fresh.dq, fresh.dk, fresh.dv, m);
  EXPECT_EQ(test::rel_err(fresh.dq, seq.dq.to_double()), 0.0);
  EXPECT_EQ(test::rel_err(fresh.dk, seq.dk.to_double()), 0.0);
  EXPECT_EQ(test::rel_err(fresh.dv, seq.dv.to_double()), 0.0);
  EXPECT_EQ(fresh.dk[0], 0.f) << "key row 0 (outside the key range) must be zero";
}

// Rows outside [q_begin,q_end) keep their state / gradients; keys outside [k_begin,k_end) contribute
// nothing and receive no gradient.
TEST(AttentionCpuRanges, SubRangesTouchOnlyTheirRows) {
  const AttnShape s{2, 90, 110, 4, 2, 16};
  Inputs in(s, 555);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    AttnMask m;
    m.causal = causal;
    m.q_offset = 20;
    m.q_begin = 5;
    m.q_end = 77;
    m.k_begin = 10;
    m.k_end = 95;
    State state(s);
    attn_fwd_block(in.q, in.k, in.v, state.st, m);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t i = 0; i < s.Nq; ++i) {
          if (i >= m.q_begin && i < m.q_end) continue;
          const int64_t r = (b * s.H + h) * s.Nq + i;
          ASSERT_EQ(state.l[r], 0.f) << "row " << i << " outside the query range changed";
          ASSERT_TRUE(std::isinf(state.m[r]) && state.m[r] < 0) << "row " << i;
          for (int64_t d = 0; d < s.D; ++d) ASSERT_EQ(state.acc[r * s.D + d], 0.f) << "row " << i;
        }
    Forward f = finalize(s, state);
    std::vector<double> out_ref, lse_ref;
    test::attention_forward_ref(s, in.q.f(), in.k.f(), in.v.f(), m, out_ref, lse_ref);
    // Compare only rows inside the query range (outside, finalize gives 0 / -inf, the reference 0 / -inf too).
    EXPECT_LT(test::rel_err(f.out, out_ref), kFwdTol);
    EXPECT_LT(lse_err(f.lse, lse_ref), kFwdTol);

    // Backward over the same ranges, with the full-row lse from a forward over all keys.
    AttnMask all = m;
    all.q_begin = 0;
    all.q_end = -1;
    all.k_begin = 0;
    all.k_end = -1;
    Forward full = forward_one_pass(in, all);
    std::vector<double> full_out_ref, full_lse_ref;
    test::attention_forward_ref(s, in.q.f(), in.k.f(), in.v.f(), all, full_out_ref, full_lse_ref);
    HostTensor delta = test::f32({s.B, s.H, s.Nq});
    attn_bwd_delta(full.out, in.dout, delta);
    std::vector<double> delta_ref = delta.to_double();
    Grads g(s, 31);
    attn_bwd_block(in.q, in.k, in.v, in.dout, full.lse, delta, g.dq, g.dk, g.dv, m);
    std::vector<double> dq_ref, dk_ref, dv_ref;
    test::attention_backward_ref(s, in.q.f(), in.k.f(), in.v.f(), in.dout.f(), full_lse_ref.data(),
                                 delta_ref.data(), m, dq_ref, dk_ref, dv_ref);
    EXPECT_LT(Grads::err(g.dq, g.dq0, dq_ref), kBwdTol);
    EXPECT_LT(Grads::err(g.dk, g.dk0, dk_ref), kBwdTol);
    EXPECT_LT(Grads::err(g.dv, g.dv0, dv_ref), kBwdTol);
    // Outside the ranges the accumulators are bit-for-bit unchanged.
    for (int64_t k = 0; k < g.dq.numel(); ++k) {
      const int64_t i = (k / (s.H * s.D)) % s.Nq;
      if (i < m.q_begin || i >= m.q_end) {
        ASSERT_EQ(double(g.dq[k]), g.dq0[size_t(k)]) << "dq row " << i;
      }
    }
    for (int64_t k = 0; k < g.dk.numel(); ++k) {
      const int64_t j = (k / (s.Hkv * s.D)) % s.Nk;
      if (j < m.k_begin || j >= m.k_end) {
        ASSERT_EQ(double(g.dk[k]), g.dk0[size_t(k)]) << "dk row " << j;
        ASSERT_EQ(double(g.dv[k]), g.dv0[size_t(k)]) << "dv row " << j;
      }
    }
  }
}

// Queries that see no key: LSE = -inf, O = 0, no NaN anywhere, and no gradient. Also a block that is
// wholly in the future leaves the state untouched, and later blocks still work.
TEST(AttentionCpuEmptyRows, NoVisibleKeyGivesMinusInfAndZero) {
  const AttnShape s{1, 70, 50, 4, 2, 16};
  Inputs in(s, 4242);
  AttnMask future;
  future.causal = true;
  future.q_offset = 0;
  future.k_offset = 1000;  // every key is after every query
  State state(s);
  attn_fwd_block(in.q, in.k, in.v, state.st, future);
  Forward f = finalize(s, state);
  for (int64_t k = 0; k < f.lse.numel(); ++k) ASSERT_TRUE(std::isinf(f.lse[k]) && f.lse[k] < 0);
  for (int64_t k = 0; k < f.out.numel(); ++k) ASSERT_EQ(f.out[k], 0.f);

  AttnMask m;
  m.causal = true;
  m.k_offset = 40;  // queries 0..39 see nothing, query i >= 40 sees keys 0..i-40
  attn_fwd_block(in.q, in.k, in.v, state.st, m);
  f = finalize(s, state);
  ASSERT_FALSE(test::any_nan(f.out));
  ASSERT_FALSE(test::any_nan(f.lse));
  for (int64_t h = 0; h < s.H; ++h)
    for (int64_t i = 0; i < s.Nq; ++i) {
      const float lse = f.lse[h * s.Nq + i];
      if (i < 40) {
        EXPECT_TRUE(std::isinf(lse) && lse < 0) << "query " << i;
        for (int64_t d = 0; d < s.D; ++d) EXPECT_EQ(f.out[(i * s.H + h) * s.D + d], 0.f);
      } else {
        EXPECT_TRUE(std::isfinite(lse)) << "query " << i;
      }
    }
  HostTensor delta = test::f32({s.B, s.H, s.Nq});
  attn_bwd_delta(f.out, in.dout, delta);
  Grads g(s, 5);
  attn_bwd_block(in.q, in.k, in.v, in.dout, f.lse, delta, g.dq, g.dk, g.dv, m);
  ASSERT_FALSE(test::any_nan(g.dq) || test::any_nan(g.dk) || test::any_nan(g.dv));
  for (int64_t k = 0; k < 40 * s.H * s.D; ++k) EXPECT_EQ(double(g.dq[k]), g.dq0[size_t(k)]);
}

TEST(AttentionCpuChecks, RefusesBadShapesAndDtypes) {
  const AttnShape s{1, 8, 8, 4, 2, 8};
  Inputs in(s, 1);
  State state(s);
  AttnMask m;
  HostTensor k3 = test::random_f32({1, 8, 3, 8}, 2);  // H=4 is not a multiple of Hkv=3
  EXPECT_THROW(attn_fwd_block(in.q, k3, k3, state.st, m), Error);
  HostTensor ki = test::HostTensor(DType::i32, {1, 8, 2, 8});
  EXPECT_THROW(attn_fwd_block(in.q, ki, in.v, state.st, m), Error);
  HostTensor vshort = test::random_f32({1, 7, 2, 8}, 3);
  EXPECT_THROW(attn_fwd_block(in.q, in.k, vshort, state.st, m), Error);
  AttnMask bad_range;
  bad_range.q_end = 9;
  EXPECT_THROW(attn_fwd_block(in.q, in.k, in.v, state.st, bad_range), Error);
  bad_range = AttnMask{};
  bad_range.k_begin = 5;
  bad_range.k_end = 4;
  EXPECT_THROW(attn_fwd_block(in.q, in.k, in.v, state.st, bad_range), Error);
  State wrong(AttnShape{1, 9, 8, 4, 2, 8});
  EXPECT_THROW(attn_fwd_block(in.q, in.k, in.v, wrong.st, m), Error);
  Forward f = finalize(s, state);
  HostTensor lse_bad = test::f32({1, 4, 9});
  EXPECT_THROW(attn_fwd_finalize(state.st, f.out, lse_bad), Error);
}

// The fp64 reference backward itself agrees with central finite differences of the reference forward,
// so the gradient tests above compare against a trustworthy reference.
TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  const AttnShape s{1, 5, 7, 2, 1, 4};
  Inputs in(s, 8);
  AttnMask m;
  m.causal = true;
  m.q_offset = 3;
  m.k_offset = 1;
  auto loss = [&](const Inputs& x) {
    std::vector<double> o, l;
    test::attention_forward_ref(s, x.q.f(), x.k.f(), x.v.f(), m, o, l);
    double sum = 0;
    for (size_t k = 0; k < o.size(); ++k) sum += o[k] * x.dout[int64_t(k)];
    return sum;
  };
  std::vector<double> o, lse;
  test::attention_forward_ref(s, in.q.f(), in.k.f(), in.v.f(), m, o, lse);
  std::vector<double> delta(size_t(s.H * s.Nq), 0.0);
  for (int64_t i = 0; i < s.Nq; ++i)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t d = 0; d < s.D; ++d) {
        const int64_t k = (i * s.H + h) * s.D + d;
        delta[size_t(h * s.Nq + i)] += o[size_t(k)] * in.dout[k];
      }
  std::vector<double> dq, dk, dv;
  test::attention_backward_ref(s, in.q.f(), in.k.f(), in.v.f(), in.dout.f(), lse.data(), delta.data(), m, dq, dk,
                               dv);
  auto check = [&](HostTensor& x, const std::vector<double>& grad, const char* name) {
    std::vector<double> fd(size_t(x.numel()));
    for (int64_t k = 0; k < x.numel(); ++k) {
      const float x0 = x[k];
      x[k] = x0 + 1e-2f;
      const double up = loss(in), hup = double(x[k]) - x0;
      x[k] = x0 - 1e-2f;
      const double dn = loss(in), hdn = double(x0) - x[k];
      x[k] = x0;
      fd[size_t(k)] = (up - dn) / (hup + hdn);
    }
    std::vector<float> g(grad.begin(), grad.end());
    EXPECT_LT(test::rel_err(g.data(), fd.data(), x.numel()), 1e-3) << name;
  };
  check(in.q, dq, "dq");
  check(in.k, dk, "dk");
  check(in.v, dv, "dv");
}

}  // namespace
}  // namespace rt
