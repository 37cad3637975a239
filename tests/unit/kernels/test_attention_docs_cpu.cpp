// CPU flash attention with a document mask (AttnMask::docs) against the fp64 reference of test_reference.h:
// documents shorter than a tile and of length 1, edges exactly on tile edges, one document over everything,
// key rows in any order (a layout permutation), GQA, sub-ranges and resumed blocks, rows with no visible key.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
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

// Positions and document starts of B samples of N tokens, each cut into documents of the given lengths
// (cycled to fill N), held in `order` (a permutation of 0..N-1: row i holds position order[i]).
struct Docs {
  std::vector<int64_t> pos, start;  // (B, N) each
  static Docs make(int64_t B, int64_t N, const std::vector<std::vector<int64_t>>& lengths_per_sample,
                   const std::vector<int64_t>& order) {
    Docs d;
    d.pos.resize(size_t(B * N));
    d.start.resize(size_t(B * N));
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int64_t>& lens = lengths_per_sample[size_t(b) % lengths_per_sample.size()];
      std::vector<int64_t> start_of(static_cast<size_t>(N));
      int64_t p = 0;
      for (size_t k = 0; p < N; k = (k + 1) % lens.size()) {
        for (int64_t t = 0; t < lens[k] && p + t < N; ++t) start_of[size_t(p + t)] = p;
        p += lens[k];
      }
      for (int64_t i = 0; i < N; ++i) {
        d.pos[size_t(b * N + i)] = order[size_t(i)];
        d.start[size_t(b * N + i)] = start_of[size_t(order[size_t(i)])];
      }
    }
    return d;
  }
};

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

AttnMask doc_mask(const Docs& q, const Docs& k, int64_t Nq, int64_t Nk) {
  AttnMask m;
  m.docs.q_pos = q.pos.data();
  m.docs.q_doc_start = q.start.data();
  m.docs.k_pos = k.pos.data();
  m.docs.q_stride = Nq;
  m.docs.k_stride = Nk;
  return m;
}

struct KernelRun {
  HostTensor out, lse, dq, dk, dv;
};

// Forward (state reset, one block, finalize) and backward (fresh gradients) with `mask`; all outputs poisoned
// first except the accumulators, which start at zero.
KernelRun run_kernels(const AttnShape& s, const HostTensor& q, const HostTensor& k, const HostTensor& v,
                const HostTensor& dout, const AttnMask& mask) {
  HostTensor acc = test::f32({s.B, s.H, s.Nq, s.D}), m = test::f32({s.B, s.H, s.Nq}), l = test::f32({s.B, s.H, s.Nq});
  test::poison(acc);
  test::poison(m);
  test::poison(l);
  AttnState st{acc.t, m.t, l.t};
  KernelRun r{test::f32({s.B, s.Nq, s.H, s.D}), test::f32({s.B, s.H, s.Nq}), test::f32({s.B, s.Nq, s.H, s.D}),
        test::f32({s.B, s.Nk, s.Hkv, s.D}), test::f32({s.B, s.Nk, s.Hkv, s.D})};
  test::poison(r.out);
  test::poison(r.lse);
  attn_fwd_whole(q, k, v, st, mask, r.out, r.lse);
  HostTensor delta = test::f32({s.B, s.H, s.Nq});
  attn_bwd_delta(r.out, dout, delta);
  test::poison(r.dk);
  test::poison(r.dv);
  fill(r.dq, 0.f);
  attn_bwd_block_fresh(q, k, v, dout, r.lse, delta, r.dq, r.dk, r.dv, mask);
  return r;
}

void check_docs(const AttnShape& s, const AttnMask& mask, uint64_t seed) {
  HostTensor q = test::random_f32({s.B, s.Nq, s.H, s.D}, seed, -2.f, 2.f);
  HostTensor k = test::random_f32({s.B, s.Nk, s.Hkv, s.D}, seed + 1, -2.f, 2.f);
  HostTensor v = test::random_f32({s.B, s.Nk, s.Hkv, s.D}, seed + 2);
  HostTensor dout = test::random_f32({s.B, s.Nq, s.H, s.D}, seed + 3);
  const KernelRun r = run_kernels(s, q, k, v, dout, mask);
  ASSERT_FALSE(test::any_nan(r.out) || test::any_nan(r.lse)) << "NaN in the forward";
  ASSERT_FALSE(test::any_nan(r.dq) || test::any_nan(r.dk) || test::any_nan(r.dv)) << "NaN in the backward";
  std::vector<double> out_ref, lse_ref;
  test::attention_forward_ref(s, q.f(), k.f(), v.f(), mask, out_ref, lse_ref);
  EXPECT_LT(test::rel_err(r.out, out_ref), kFwdTol);
  EXPECT_LT(lse_err(r.lse, lse_ref), kFwdTol);
  std::vector<double> delta_ref(size_t(s.B * s.H * s.Nq), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.Nq; ++i)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t d = 0; d < s.D; ++d) {
          const int64_t o = ((b * s.Nq + i) * s.H + h) * s.D + d;
          delta_ref[size_t((b * s.H + h) * s.Nq + i)] += out_ref[size_t(o)] * dout[o];
        }
  std::vector<double> dq_ref, dk_ref, dv_ref;
  test::attention_backward_ref(s, q.f(), k.f(), v.f(), dout.f(), lse_ref.data(), delta_ref.data(), mask, dq_ref,
                               dk_ref, dv_ref);
  EXPECT_LT(test::rel_err(r.dq, dq_ref), kBwdTol);
  EXPECT_LT(test::rel_err(r.dk, dk_ref), kBwdTol);
  EXPECT_LT(test::rel_err(r.dv, dv_ref), kBwdTol);
}

struct DocCase {
  std::string name;
  AttnShape s;
  std::vector<std::vector<int64_t>> lengths;  // per sample (cycled)
  bool shuffled;                              // rows in a random permutation of positions
};
void PrintTo(const DocCase& c, std::ostream* os) { *os << c.name; }

class AttentionDocsCpu : public ::testing::TestWithParam<DocCase> {};

TEST_P(AttentionDocsCpu, ForwardAndBackwardMatchFp64Reference) {
  const DocCase& c = GetParam();
  std::vector<int64_t> order = identity(c.s.Nq);
  if (c.shuffled) std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  const Docs d = Docs::make(c.s.B, c.s.Nq, c.lengths, order);
  check_docs(c.s, doc_mask(d, d, c.s.Nq, c.s.Nk), 2024);
}

INSTANTIATE_TEST_SUITE_P(
    Mixes, AttentionDocsCpu,
    ::testing::Values(
        DocCase{"short_and_length_one_gqa", {2, 300, 300, 4, 2, 16}, {{1, 3, 1, 50, 1, 200, 7}, {5, 1, 1, 290}}, false},
        DocCase{"edges_on_tile_edges", {1, 384, 384, 2, 1, 16}, {{128, 128, 128}}, false},
        DocCase{"edges_one_off_tile_edges", {1, 300, 300, 2, 2, 16}, {{127, 2, 127, 44}}, false},
        DocCase{"one_document_everywhere", {1, 270, 270, 4, 1, 32}, {{100000}}, false},
        DocCase{"every_token_its_own_document", {1, 130, 130, 2, 1, 8}, {{1}}, false},
        DocCase{"shuffled_rows_mqa", {2, 260, 260, 4, 1, 16}, {{37, 1, 90, 2, 130}, {260}}, true}),
    [](const ::testing::TestParamInfo<DocCase>& info) { return info.param.name; });

// One document over the whole sample is exactly the causal mask: same result as the plain causal kernels.
TEST(AttentionDocsCpuEquivalence, SingleDocumentEqualsCausal) {
  const AttnShape s{2, 200, 200, 4, 2, 16};
  HostTensor q = test::random_f32({s.B, s.Nq, s.H, s.D}, 5, -2.f, 2.f), k = test::random_f32({s.B, s.Nk, s.Hkv, s.D}, 6);
  HostTensor v = test::random_f32({s.B, s.Nk, s.Hkv, s.D}, 7), dout = test::random_f32({s.B, s.Nq, s.H, s.D}, 8);
  const Docs d = Docs::make(s.B, s.Nq, {{s.Nq}}, identity(s.Nq));
  AttnMask causal;
  causal.causal = true;
  const KernelRun a = run_kernels(s, q, k, v, dout, doc_mask(d, d, s.Nq, s.Nk));
  const KernelRun b = run_kernels(s, q, k, v, dout, causal);
  EXPECT_LT(test::rel_err(a.out, b.out.to_double()), 1e-6);
  EXPECT_LT(test::rel_err(a.dq, b.dq.to_double()), 1e-6);
  EXPECT_LT(test::rel_err(a.dk, b.dk.to_double()), 1e-6);
  // Bit-identical: in a tile with a document edge, a row's visible keys are one run, summed as the causal
  // path sums its visible prefix (200 rows: the tiles [128, 200) are partial).
  EXPECT_EQ(a.out.to_double(), b.out.to_double());
  EXPECT_EQ(a.lse.to_double(), b.lse.to_double());
  EXPECT_EQ(a.dq.to_double(), b.dq.to_double());
  EXPECT_EQ(a.dk.to_double(), b.dk.to_double());
  EXPECT_EQ(a.dv.to_double(), b.dv.to_double());
}

// Keys split into blocks at arbitrary cuts (as ring chunks) with the query range restricted: resumed forward
// and per-block backward equal one pass, and a block whose keys all lie in other documents leaves its rows at
// lse = -inf with no NaN.
TEST(AttentionDocsCpuBlocks, ResumedBlocksAndEmptyRows) {
  const AttnShape s{1, 256, 256, 2, 1, 16};
  HostTensor q = test::random_f32({s.B, s.Nq, s.H, s.D}, 11, -2.f, 2.f), k = test::random_f32({s.B, s.Nk, s.Hkv, s.D}, 12);
  HostTensor v = test::random_f32({s.B, s.Nk, s.Hkv, s.D}, 13);
  const Docs d = Docs::make(s.B, s.Nq, {{64, 1, 63, 128}}, identity(s.Nq));
  const AttnMask whole = doc_mask(d, d, s.Nq, s.Nk);
  HostTensor acc = test::f32({s.B, s.H, s.Nq, s.D}), m = test::f32({s.B, s.H, s.Nq}), l = test::f32({s.B, s.H, s.Nq});
  AttnState st{acc.t, m.t, l.t};
  attn_state_reset(st);
  for (int64_t cut : {0, 64, 65, 128}) {  // key blocks [0,64) [64,65) [65,128) [128,256): document edges
    AttnMask blk = whole;
    blk.k_begin = cut;
    blk.k_end = cut == 0 ? 64 : cut == 64 ? 65 : cut == 65 ? 128 : 256;
    attn_fwd_block(q, k, v, st, blk);
  }
  HostTensor out = test::f32({s.B, s.Nq, s.H, s.D}), lse = test::f32({s.B, s.H, s.Nq});
  attn_fwd_finalize(st, out, lse);
  std::vector<double> out_ref, lse_ref;
  test::attention_forward_ref(s, q.f(), k.f(), v.f(), whole, out_ref, lse_ref);
  EXPECT_LT(test::rel_err(out, out_ref), kFwdTol);
  EXPECT_LT(lse_err(lse, lse_ref), kFwdTol);

  // Queries of the last document [128,256) against only the keys [0,128): nothing visible.
  AttnMask none = whole;
  none.q_begin = 128;
  none.k_end = 128;
  attn_state_reset(st);
  attn_fwd_block(q, k, v, st, none);
  test::poison(out);
  test::poison(lse);
  attn_fwd_finalize(st, out, lse);
  ASSERT_FALSE(test::any_nan(out) || test::any_nan(lse));
  for (int64_t h = 0; h < s.H; ++h)
    for (int64_t i = 0; i < s.Nq; ++i) EXPECT_TRUE(std::isinf(lse[h * s.Nq + i]) && lse[h * s.Nq + i] < 0) << i;
  HostTensor dout = test::random_f32({s.B, s.Nq, s.H, s.D}, 14), delta = test::f32({s.B, s.H, s.Nq});
  attn_bwd_delta(out, dout, delta);
  HostTensor dq = test::f32({s.B, s.Nq, s.H, s.D}), dk = test::f32({s.B, s.Nk, s.Hkv, s.D}),
             dv = test::f32({s.B, s.Nk, s.Hkv, s.D});
  attn_bwd_block(q, k, v, dout, lse, delta, dq, dk, dv, none);
  ASSERT_FALSE(test::any_nan(dq) || test::any_nan(dk) || test::any_nan(dv));
  EXPECT_EQ(sum_squares(dq) + sum_squares(dk), 0.0);
}

TEST(AttentionDocsCpuChecks, RefusesIncompleteDocumentMask) {
  const AttnShape s{1, 8, 8, 2, 1, 8};
  HostTensor q = test::random_f32({1, 8, 2, 8}, 1), k = test::random_f32({1, 8, 1, 8}, 2);
  HostTensor acc = test::f32({1, 2, 8, 8}), m = test::f32({1, 2, 8}), l = test::f32({1, 2, 8});
  AttnState st{acc.t, m.t, l.t};
  std::vector<int64_t> pos(8, 0);
  AttnMask bad;
  bad.docs.q_pos = pos.data();  // q_doc_start and k_pos missing
  bad.docs.q_stride = bad.docs.k_stride = 8;
  EXPECT_THROW(attn_fwd_block(q, k, k, st, bad), Error);
  bad.docs.q_doc_start = pos.data();
  bad.docs.k_pos = pos.data();
  bad.docs.k_stride = 4;  // shorter than the 8 key rows
  EXPECT_THROW(attn_fwd_block(q, k, k, st, bad), Error);
  (void)s;
}

}  // namespace
}  // namespace rt
