// attn_bwd_block's wgmma kernels (bwd v4 and the warp-specialized v5, sm_90a; kernels/cuda/attention/attn_bwd_sm90.cu and
// attn_bwd_sm90ws.cu), forced with set_attn_variant_override (4 / 5), against an fp64 host reference and against the mma.sync kernel
// (variant 1) on the same inputs, every case for head dim 128 and 64 and both variants. Fresh random bf16 q/k/v/dout, lse = the true log-sum-exp
// of the visible keys plus a random positive offset (as if other K/V blocks contributed; -inf for rows that
// see no key), random delta; dq/dk/dv accumulators pre-filled with random values (the op accumulates).
// Checked: the increments (out - initial) against the fp64 gradients and against v1 with
// ||x - ref|| / ||ref|| <= 1e-2, rows outside the query / key ranges bit for bit unchanged, no NaN;
// deterministic mode repeats bit for bit. Skips without a CUDA device or when the device cannot run the
// wgmma kernel (compute capability other than 9.0, no sm_90a build).
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <tuple>

#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "tests/gpu/attention_test_util.h"

namespace rt::test {
namespace {

// Forces the backward variant for its scope (set_attn_variant_override).
struct ForcedBwdVariant : ScopedAttnVariant {
  explicit ForcedBwdVariant(const char* variant) : ScopedAttnVariant(nullptr, variant) {}
};

struct BwdCase {
  const char* name;
  int64_t B, Nq, Nk, H, Hkv;
  AttnMask mask;
};

struct Inputs {
  std::vector<float> q, k, v, dout;  // (B,Nq,H,D), (B,Nk,Hkv,D) x2, (B,Nq,H,D); bf16-rounded
  std::vector<float> lse, delta;     // (B,H,Nq)
  std::vector<float> dq, dk, dv;     // initial accumulators (B,Nq,H,D), (B,Nk,Hkv,D) x2
};

struct Grads {
  std::vector<float> dq, dk, dv;
};

bool visible(const AttnMask& m, int64_t i, int64_t j) { return !m.causal || m.k_offset + j <= m.q_offset + i; }

Inputs make_inputs(const BwdCase& c, int64_t D, uint64_t seed) {
  const int64_t B = c.B, Nq = c.Nq, Nk = c.Nk, H = c.H, Hkv = c.Hkv, group = H / Hkv;
  const int64_t qe = c.mask.q_end < 0 ? Nq : c.mask.q_end, ke = c.mask.k_end < 0 ? Nk : c.mask.k_end;
  Inputs in;
  in.q = bf16_rounded(random_vector(B * Nq * H * D, seed, 1.2f));
  in.k = bf16_rounded(random_vector(B * Nk * Hkv * D, seed + 1, 1.2f));
  in.v = bf16_rounded(random_vector(B * Nk * Hkv * D, seed + 2));
  in.dout = bf16_rounded(random_vector(B * Nq * H * D, seed + 3));
  in.delta = random_vector(B * H * Nq, seed + 4, 0.3f);
  in.dq = random_vector(B * Nq * H * D, seed + 5);
  in.dk = random_vector(B * Nk * Hkv * D, seed + 6);
  in.dv = random_vector(B * Nk * Hkv * D, seed + 7);
  const std::vector<float> off = random_vector(B * H * Nq, seed + 8);
  in.lse.assign(size_t(B * H * Nq), 0.f);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Nq; ++i) {
        const size_t row = size_t((b * H + h) * Nq + i);
        const double extra = 0.5 * std::fabs(double(off[row]));
        if (i < c.mask.q_begin || i >= qe) {
          in.lse[row] = float(extra);  // not read
          continue;
        }
        double mx = -INFINITY, sum = 0;
        std::vector<double> xs;
        for (int64_t j = c.mask.k_begin; j < ke; ++j) {
          if (!visible(c.mask, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(in.q[size_t(((b * Nq + i) * H + h) * D + d)]) *
                   double(in.k[size_t(((b * Nk + j) * Hkv + h / group) * D + d)]);
          xs.push_back(dot * scale);
          mx = std::max(mx, dot * scale);
        }
        for (double x : xs) sum += std::exp(x - mx);
        in.lse[row] = xs.empty() ? -INFINITY : float(mx + std::log(sum) + extra);
      }
  return in;
}

// fp64 gradients of the block (not including the initial accumulator values).
Grads reference(const BwdCase& c, int64_t D, const Inputs& in) {
  const int64_t B = c.B, Nq = c.Nq, Nk = c.Nk, H = c.H, Hkv = c.Hkv, group = H / Hkv;
  const int64_t qe = c.mask.q_end < 0 ? Nq : c.mask.q_end, ke = c.mask.k_end < 0 ? Nk : c.mask.k_end;
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> dq(in.dq.size(), 0.0), dk(in.dk.size(), 0.0), dv(in.dv.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = c.mask.q_begin; i < qe; ++i) {
        const double lse = in.lse[size_t((b * H + h) * Nq + i)];
        if (std::isinf(lse)) continue;
        const double dl = in.delta[size_t((b * H + h) * Nq + i)];
        const float* qi = &in.q[size_t(((b * Nq + i) * H + h) * D)];
        const float* oi = &in.dout[size_t(((b * Nq + i) * H + h) * D)];
        double* dqi = &dq[size_t(((b * Nq + i) * H + h) * D)];
        for (int64_t j = c.mask.k_begin; j < ke; ++j) {
          if (!visible(c.mask, i, j)) continue;
          const size_t kv = size_t(((b * Nk + j) * Hkv + h / group) * D);
          const float* kj = &in.k[kv];
          const float* vj = &in.v[kv];
          double s = 0, dp = 0;
          for (int64_t d = 0; d < D; ++d) {
            s += double(qi[d]) * double(kj[d]);
            dp += double(oi[d]) * double(vj[d]);
          }
          const double pij = std::exp(s * scale - lse);
          const double ds = pij * (dp - dl);
          for (int64_t d = 0; d < D; ++d) {
            dv[kv + size_t(d)] += pij * double(oi[d]);
            dk[kv + size_t(d)] += scale * ds * double(qi[d]);
            dqi[d] += scale * ds * double(kj[d]);
          }
        }
      }
  auto to_f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  return Grads{to_f(dq), to_f(dk), to_f(dv)};
}

struct Outputs {
  std::vector<float> dq, dk, dv;  // final accumulators
};

// Runs the backward on the GPU from `in`: attn_bwd_block with the backward variant forced to `variant` into the initial
// accumulators, or (fresh) attn_bwd_block_fresh with the default dispatch into poisoned dk / dv (every row must
// be written).
Outputs run_gpu_op(const BwdCase& c, int64_t D, const Inputs& in, const char* variant, bool fresh) {
  const int64_t B = c.B, Nq = c.Nq, Nk = c.Nk, H = c.H, Hkv = c.Hkv;
  Buffer gq(gpu(), DType::bf16, {B, Nq, H, D}), gk(gpu(), DType::bf16, {B, Nk, Hkv, D}),
      gv(gpu(), DType::bf16, {B, Nk, Hkv, D}), gdo(gpu(), DType::bf16, {B, Nq, H, D});
  Buffer glse(gpu(), DType::f32, {B, H, Nq}), gdelta(gpu(), DType::f32, {B, H, Nq});
  Buffer gdq(gpu(), DType::f32, {B, Nq, H, D}), gdk(gpu(), DType::f32, {B, Nk, Hkv, D}),
      gdv(gpu(), DType::f32, {B, Nk, Hkv, D});
  poison(gdq); poison(gdk); poison(gdv);
  upload(gq, in.q); upload(gk, in.k); upload(gv, in.v); upload(gdo, in.dout);
  upload(glse, in.lse); upload(gdelta, in.delta); upload(gdq, in.dq);
  if (fresh) {
    attn_bwd_block_fresh(gq.t(), gk.t(), gv.t(), gdo.t(), glse.t(), gdelta.t(), gdq.t(), gdk.t(), gdv.t(), c.mask);
  } else {
    upload(gdk, in.dk); upload(gdv, in.dv);
    ForcedBwdVariant forced(variant);
    attn_bwd_block(gq.t(), gk.t(), gv.t(), gdo.t(), glse.t(), gdelta.t(), gdq.t(), gdk.t(), gdv.t(), c.mask);
  }
  return Outputs{download(gdq), download(gdk), download(gdv)};
}

Outputs run_gpu(const BwdCase& c, int64_t D, const Inputs& in, const char* variant) {
  return run_gpu_op(c, D, in, variant, false);
}

std::vector<float> increment(const std::vector<float>& out, const std::vector<float>& init) {
  std::vector<float> r(out.size());
  for (size_t i = 0; i < out.size(); ++i) r[i] = float(double(out[i]) - double(init[i]));
  return r;
}

// Rows (token index `axis` of (B, N, heads, D)) outside [lo, hi) must keep the initial values exactly.
int64_t rows_changed_outside(const std::vector<float>& out, const std::vector<float>& init, int64_t N,
                             int64_t row_elems, int64_t lo, int64_t hi) {
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t row = int64_t(i) / row_elems % N;
    if (row >= lo && row < hi) continue;
    if (!(out[i] == init[i])) ++bad;
  }
  return bad;
}

bool any_nan(const std::vector<float>& x) {
  for (float v : x)
    if (std::isnan(v)) return true;
  return false;
}

void check_against(const char* what, const Outputs& o, const Inputs& in, const Grads& ref, double tol) {
  const double eq = rel_error(increment(o.dq, in.dq), ref.dq), ek = rel_error(increment(o.dk, in.dk), ref.dk),
               ev = rel_error(increment(o.dv, in.dv), ref.dv);
  std::cout << "  " << what << ": dq " << eq << " dk " << ek << " dv " << ev << "\n";
  EXPECT_LE(eq, tol) << what << " dq " << worst_mismatch(increment(o.dq, in.dq), ref.dq);
  EXPECT_LE(ek, tol) << what << " dk " << worst_mismatch(increment(o.dk, in.dk), ref.dk);
  EXPECT_LE(ev, tol) << what << " dv " << worst_mismatch(increment(o.dv, in.dv), ref.dv);
}

// `variant` is the wgmma kernel under test ("4" or "5").
void run_case(const BwdCase& c, int64_t D, const char* variant, uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + " D=" + std::to_string(D) + " v" + variant);
  const std::string v = std::string("v") + variant;
  const Inputs in = make_inputs(c, D, seed);
  const Grads ref = reference(c, D, in);
  const Outputs got = run_gpu(c, D, in, variant);
  const Outputs v1 = run_gpu(c, D, in, "1");
  std::cout << "[attn bwd wgmma] " << c.name << " D=" << D << " " << v << "\n";
  ASSERT_FALSE(any_nan(got.dq) || any_nan(got.dk) || any_nan(got.dv)) << "NaN in the " << v << " gradients";
  check_against((v + " vs fp64").c_str(), got, in, ref, 1e-2);
  check_against("v1 vs fp64", v1, in, ref, 1e-2);
  check_against((v + " vs v1").c_str(), got, in,
                Grads{increment(v1.dq, in.dq), increment(v1.dk, in.dk), increment(v1.dv, in.dv)}, 1e-2);
  if (std::string(variant) == "5") {  // same MMAs and exps as v4: dK / dV bit for bit, dQ up to the add order
    const Outputs v4 = run_gpu(c, D, in, "4");
    check_against("v5 vs v4", got, in, Grads{increment(v4.dq, in.dq), increment(v4.dk, in.dk), increment(v4.dv, in.dv)},
                  1e-5);
    EXPECT_TRUE(got.dk == v4.dk && got.dv == v4.dv) << "v5 dK / dV differ from v4's";
  }
  const int64_t qe = c.mask.q_end < 0 ? c.Nq : c.mask.q_end, ke = c.mask.k_end < 0 ? c.Nk : c.mask.k_end;
  EXPECT_EQ(rows_changed_outside(got.dq, in.dq, c.Nq, c.H * D, c.mask.q_begin, qe), 0) << "dq rows outside the query range";
  EXPECT_EQ(rows_changed_outside(got.dk, in.dk, c.Nk, c.Hkv * D, c.mask.k_begin, ke), 0) << "dk rows outside the key range";
  EXPECT_EQ(rows_changed_outside(got.dv, in.dv, c.Nk, c.Hkv * D, c.mask.k_begin, ke), 0) << "dv rows outside the key range";
}

// Every case runs for head dim D = 128 and D = 64 and for the wgmma variants 4 and 5 (GetParam()).
class CudaAttentionWgmmaBwd : public ::testing::TestWithParam<std::tuple<int64_t, const char*>> {
 protected:
  int64_t D() const { return std::get<0>(GetParam()); }
  const char* variant() const { return std::get<1>(GetParam()); }
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    if (!cuda::attn_bwd_wgmma_supported(0, D()))
      GTEST_SKIP() << "device 0 cannot run the wgmma backward (needs compute capability 9.0 and an sm_90a build)";
  }
};

TEST_P(CudaAttentionWgmmaBwd, NonCausalGqaRaggedLengths) {
  run_case({"noncausal_gqa", 2, 300, 260, 4, 2, mask(false, 0, 0)}, D(), variant(), 100);
}

TEST_P(CudaAttentionWgmmaBwd, CausalManyTiles) {
  run_case({"causal_many_tiles", 1, 700, 700, 2, 1, mask(true, 0, 0)}, D(), variant(), 200);
}

TEST_P(CudaAttentionWgmmaBwd, CausalRowsWithoutKeys) {
  // k_offset 40: query rows 0..39 see no key (lse -inf, P = 0).
  run_case({"causal_empty_rows", 1, 150, 260, 2, 1, mask(true, 0, 40)}, D(), variant(), 300);
}

TEST_P(CudaAttentionWgmmaBwd, ZigzagLaterQueryHalfEarlierKeyHalf) {
  run_case({"zigzag_full_half", 2, 512, 512, 2, 2, mask(false, 0, 0, 256, 512, 0, 256)}, D(), variant(), 400);
}

TEST_P(CudaAttentionWgmmaBwd, ZigzagDiagonalHalfWithOffsets) {
  run_case({"zigzag_diag_half", 1, 512, 512, 4, 1, mask(true, 256, 256, 0, 256, 0, 256)}, D(), variant(), 500);
}

TEST_P(CudaAttentionWgmmaBwd, CausalOddSubRangesAndOffsets) {
  // diag 63, query rows [37, 300), key rows [20, 290): unaligned tiles at both ends.
  run_case({"causal_sub_ranges", 2, 330, 310, 2, 2, mask(true, 1000, 937, 37, 300, 20, 290)}, D(), variant(), 600);
}

TEST_P(CudaAttentionWgmmaBwd, NonCausalUnalignedKeyRange) {
  run_case({"noncausal_key_range", 1, 200, 1100, 2, 1, mask(false, 0, 0, 0, -1, 70, 1030)}, D(), variant(), 700);
}

TEST_P(CudaAttentionWgmmaBwd, QueryBlockShorterThanOneTile) {
  // q_end = 40 < 64 rows: v5's TMA box would be longer than the tensor map's rows, so v5 hands it to v4.
  run_case({"short_query_block", 2, 40, 300, 2, 1, mask(false, 0, 0)}, D(), variant(), 800);
}

TEST_P(CudaAttentionWgmmaBwd, KeyBlockShorterThanOneTile) {
  // k_end = 100 < 128 rows: v5's K / V TMA box would be longer than the tensor map's rows, so v5 hands it to v4.
  run_case({"short_key_block", 2, 300, 100, 2, 1, mask(false, 0, 0)}, D(), variant(), 850);
}

TEST_P(CudaAttentionWgmmaBwd, CausalLastTileOneRow) {
  // q_end = 129: the last query tile has one valid row (the dQ tensor reduce must skip the other 63).
  run_case({"causal_one_row_tile", 1, 129, 129, 2, 2, mask(true, 0, 0)}, D(), variant(), 900);
}

TEST_P(CudaAttentionWgmmaBwd, CausalManyUnitsPerCtaWithUnseenKeys) {
  // 4 x 8 pairs x 6 key tiles = 192 units, more than an H100 / H200 has SMs: bwd v5's persistent CTAs fetch
  // several, among them the 64 whose keys (512..767, after every query) no query sees.
  run_case({"causal_many_units", 4, 512, 768, 16, 8, mask(true, 0, 0)}, D(), variant(), 950);
}

// Deterministic mode keeps the ordered dQ adds: the same bits on two runs, and still the right gradients.
TEST_P(CudaAttentionWgmmaBwd, DeterministicRepeatsBitForBit) {
  const BwdCase c{"deterministic", 1, 768, 768, 4, 2, mask(true, 0, 0)};
  const int64_t D = this->D();
  const Inputs in = make_inputs(c, D, 800);
  set_deterministic_attention(true);
  const Outputs first = run_gpu(c, D, in, variant());
  const Outputs second = run_gpu(c, D, in, variant());
  set_deterministic_attention(false);
  std::cout << "[attn bwd wgmma] deterministic D=" << D << " v" << variant() << "\n";
  EXPECT_TRUE(first.dq == second.dq) << "deterministic dQ differs between two runs";
  EXPECT_TRUE(first.dk == second.dk && first.dv == second.dv) << "deterministic dK/dV differ between two runs";
  check_against((std::string("v") + variant() + " deterministic vs fp64").c_str(), first, in, reference(c, D, in), 1e-2);
}

// Suite names start with CudaAttentionWgmmaBwd so that --gtest_filter='CudaAttentionWgmmaBwd*' selects them.
INSTANTIATE_TEST_SUITE_P(CudaAttentionWgmmaBwdHeadDim, CudaAttentionWgmmaBwd,
                         ::testing::Combine(::testing::Values(int64_t(128), int64_t(64)),
                                            ::testing::Values("4", "5")),
                         [](const ::testing::TestParamInfo<std::tuple<int64_t, const char*>>& info) {
                           std::string name = "D";
                           name += std::to_string(std::get<0>(info.param));
                           name += "_v";
                           name += std::get<1>(info.param);
                           return name;
                         });

// ---- attn_bwd_block_fresh: dk / dv are overwritten with the block's gradients, dq still accumulates ----------
// Fused (bwd v5 storing dK / dV with TMA) where the key range is every row and q_end >= 64, else fill + attn_bwd_block.

Outputs run_gpu_fresh(const BwdCase& c, int64_t D, const Inputs& in) { return run_gpu_op(c, D, in, nullptr, true); }

void run_fresh_case(const BwdCase& c, int64_t D, uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + " D=" + std::to_string(D));
  Inputs in = make_inputs(c, D, seed);
  std::fill(in.dk.begin(), in.dk.end(), 0.f);  // what the gradients are measured from (and the sequence starts at)
  std::fill(in.dv.begin(), in.dv.end(), 0.f);
  const Grads ref = reference(c, D, in);
  const Outputs got = run_gpu_fresh(c, D, in);
  const Outputs seq = run_gpu(c, D, in, "5");  // fill(dk, 0), fill(dv, 0), attn_bwd_block
  std::cout << "[attn bwd fresh] " << c.name << " D=" << D << "\n";
  ASSERT_FALSE(any_nan(got.dq) || any_nan(got.dk) || any_nan(got.dv)) << "NaN in the fresh gradients";
  check_against("fresh vs fp64", got, in, ref, 1e-2);
  // 0 + x = x: the kernel's stores equal the sequence's adds into zero bit for bit; dQ up to the add order.
  EXPECT_TRUE(got.dk == seq.dk && got.dv == seq.dv) << "fresh dK / dV differ from fill + attn_bwd_block";
  check_against("fresh vs sequence", got, in, Grads{increment(seq.dq, in.dq), seq.dk, seq.dv}, 1e-5);
  const int64_t ke = c.mask.k_end < 0 ? c.Nk : c.mask.k_end;
  EXPECT_EQ(rows_changed_outside(got.dk, in.dk, c.Nk, c.Hkv * D, c.mask.k_begin, ke), 0) << "dk rows outside: not 0";
  EXPECT_EQ(rows_changed_outside(got.dv, in.dv, c.Nk, c.Hkv * D, c.mask.k_begin, ke), 0) << "dv rows outside: not 0";
}

class CudaAttentionBwdFresh : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaAttentionBwdFresh, FusedNonCausalGqa) {
  run_fresh_case({"fresh_noncausal_gqa", 2, 300, 260, 4, 2, mask(false, 0, 0)}, GetParam(), 1100);
}

TEST_P(CudaAttentionBwdFresh, FusedCausalKeysNoQuerySees) {
  // Keys 150..399 come after every query: key tiles 2 and 3 are visited by no query tile and store zeros.
  run_fresh_case({"fresh_causal_unseen_keys", 1, 150, 400, 2, 1, mask(true, 0, 0)}, GetParam(), 1200);
}

TEST_P(CudaAttentionBwdFresh, KeySubRangeFallsBack) {
  run_fresh_case({"fresh_key_range", 1, 200, 1100, 2, 1, mask(false, 0, 0, 0, -1, 70, 1030)}, GetParam(), 1300);
}

TEST_P(CudaAttentionBwdFresh, ShortKeyBlockFallsBack) {
  run_fresh_case({"fresh_short_keys", 2, 300, 100, 2, 1, mask(false, 0, 0)}, GetParam(), 1450);
}

TEST_P(CudaAttentionBwdFresh, ShortQueryBlockFallsBack) {
  run_fresh_case({"fresh_short_query", 2, 40, 300, 2, 1, mask(false, 0, 0)}, GetParam(), 1400);
}

// Deterministic mode, fresh: two runs give the same bits, and the gradients are right.
void run_fresh_deterministic_case(const BwdCase& c, int64_t D, uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + " D=" + std::to_string(D));
  Inputs in = make_inputs(c, D, seed);
  std::fill(in.dk.begin(), in.dk.end(), 0.f);
  std::fill(in.dv.begin(), in.dv.end(), 0.f);
  set_deterministic_attention(true);
  const Outputs first = run_gpu_fresh(c, D, in);
  const Outputs second = run_gpu_fresh(c, D, in);
  set_deterministic_attention(false);
  EXPECT_TRUE(first.dq == second.dq && first.dk == second.dk && first.dv == second.dv)
      << "deterministic fresh backward differs between two runs";
  check_against("fresh deterministic vs fp64", first, in, reference(c, D, in), 1e-2);
}

TEST_P(CudaAttentionBwdFresh, DeterministicRepeatsBitForBit) {
  run_fresh_deterministic_case({"fresh_deterministic", 1, 768, 768, 4, 2, mask(true, 0, 0)}, GetParam(), 1500);
}

TEST_P(CudaAttentionBwdFresh, CausalManyUnitsPerCtaWithUnseenKeys) {
  // 192 units over the SMs (see the accumulating case): the unseen key tiles store zeros between other units.
  run_fresh_case({"fresh_causal_many_units", 4, 512, 768, 16, 8, mask(true, 0, 0)}, GetParam(), 1550);
}

// Deterministic mode with several units per CTA: a unit's dQ adds wait for the key tiles before it, which other
// CTAs (or this one, earlier) fetched first.
TEST_P(CudaAttentionBwdFresh, DeterministicManyUnitsPerCta) {
  run_fresh_deterministic_case({"fresh_deterministic_many_units", 8, 768, 768, 8, 4, mask(true, 0, 0)}, GetParam(),
                               1570);
}

// The same without the causal mask: every key tile adds into every query tile, so each tile's turns pass through
// all six key tiles of its pair, units of one pair run side by side, and each hands a tile's turn on only after
// its next tile's adds are issued.
TEST_P(CudaAttentionBwdFresh, DeterministicNonCausalManyUnitsPerCta) {
  run_fresh_deterministic_case({"fresh_deterministic_noncausal", 8, 768, 768, 8, 4, mask(false, 0, 0)}, GetParam(),
                               1580);
}

// Key rows [lo, hi) of a (1, Nk, 1, D) gradient.
std::vector<float> key_rows(const std::vector<float>& x, int64_t D, int64_t lo, int64_t hi) {
  return std::vector<float>(x.begin() + lo * D, x.begin() + hi * D);
}

// One partial wave of 3 items past the SM count (B = Hkv = 1: item = key tile): bwd v5 splits each of the last
// 3 key tiles into pieces (here one (head, query tile) iteration each) that add partial dK / dV; accumulating
// and overwriting. Those rows are checked on their own, where a lost or doubled piece would show.
TEST_P(CudaAttentionBwdFresh, SplitTailPiecesAddUp) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t D = GetParam(), tail_lo = int64_t(sms) * 128, Nk = (int64_t(sms) + 3) * 128;
  const BwdCase c{"split_tail", 1, 192, Nk, 2, 1, mask(false, 0, 0)};
  const Inputs in = make_inputs(c, D, 1600);
  const Grads ref = reference(c, D, in);
  Inputs zeroed = in;
  std::fill(zeroed.dk.begin(), zeroed.dk.end(), 0.f);
  std::fill(zeroed.dv.begin(), zeroed.dv.end(), 0.f);
  const Outputs acc = run_gpu(c, D, in, "5");
  const Outputs fresh = run_gpu_fresh(c, D, zeroed);
  std::cout << "[attn bwd split tail] D=" << D << " key tiles " << sms + 3 << "\n";
  ASSERT_FALSE(any_nan(acc.dk) || any_nan(acc.dv) || any_nan(fresh.dq) || any_nan(fresh.dk) || any_nan(fresh.dv));
  check_against("split accumulate vs fp64", acc, in, ref, 1e-2);
  check_against("split fresh vs fp64", fresh, zeroed, ref, 1e-2);
  for (const Outputs* o : {&acc, &fresh}) {
    const Inputs& start = o == &acc ? in : zeroed;
    const double ek = rel_error(key_rows(increment(o->dk, start.dk), D, tail_lo, Nk), key_rows(ref.dk, D, tail_lo, Nk));
    const double ev = rel_error(key_rows(increment(o->dv, start.dv), D, tail_lo, Nk), key_rows(ref.dv, D, tail_lo, Nk));
    std::cout << "  split rows (" << (o == &acc ? "accumulate" : "fresh") << "): dk " << ek << " dv " << ev << "\n";
    EXPECT_LE(ek, 1e-2) << "dK of the split key tiles";
    EXPECT_LE(ev, 1e-2) << "dV of the split key tiles";
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDim, CudaAttentionBwdFresh, ::testing::Values(int64_t(128), int64_t(64)),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "D" + std::to_string(info.param);
                         });

// The fp64 reference above against the CPU backend's attn_bwd_block: guards the reference; needs no GPU.
TEST(CudaAttentionWgmmaBwdReference, MatchesCpuBackend) {
  const BwdCase c{"reference_vs_cpu", 1, 90, 80, 2, 1, mask(true, 300, 290, 5, 85, 3, 77)};
  const int64_t D = 64;
  const Inputs in = make_inputs(c, D, 900);
  const Grads ref = reference(c, D, in);
  std::vector<float> q = in.q, k = in.k, v = in.v, dout = in.dout, lse = in.lse, delta = in.delta;
  std::vector<float> dq = in.dq, dk = in.dk, dv = in.dv;
  RT_CPU_REFERENCE(attn_bwd_block(host_view(q, {c.B, c.Nq, c.H, D}), host_view(k, {c.B, c.Nk, c.Hkv, D}),
                                  host_view(v, {c.B, c.Nk, c.Hkv, D}), host_view(dout, {c.B, c.Nq, c.H, D}),
                                  host_view(lse, {c.B, c.H, c.Nq}), host_view(delta, {c.B, c.H, c.Nq}),
                                  host_view(dq, {c.B, c.Nq, c.H, D}), host_view(dk, {c.B, c.Nk, c.Hkv, D}),
                                  host_view(dv, {c.B, c.Nk, c.Hkv, D}), c.mask));
  check_against("reference vs cpu", Outputs{dq, dk, dv}, in, ref, 1e-4);
}

}  // namespace
}  // namespace rt::test
