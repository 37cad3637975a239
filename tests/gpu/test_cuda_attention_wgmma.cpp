// attn_fwd_block's Hopper kernels (sm_90a): fwd v4 (wgmma, kernels/cuda/attention/attn_fwd_sm90.cu) and fwd v5 (TMA
// producer warpgroup + 1, 2 or 3 consumer warpgroups, kernels/cuda/attention/attn_fwd_sm90ws.cu; every tile height: 64 and 128
// query rows at both head dims, 192 at D = 64), forced with set_attn_variant_override,
// against an fp64 host reference of the same sequence of blocks and against the mma.sync kernel (variant 2)
// on the same inputs (v5 also against v4). Each case starts from a fresh state (reset) or from a
// random resumable state (some rows never seen: m = -inf), runs one or more blocks, then finalizes into
// NaN-poisoned out/lse. Checked: out (bf16, P rounded to bf16) 1e-2 relative to fp64; lse 1e-4 absolute;
// v4/v5 vs v2 (and v5 vs v4): out 1e-2 relative, lse and m 1e-4 absolute; rows outside every block's query range keep their
// state bit for bit; no NaN anywhere. Skips when there is no CUDA device or it cannot run the kernel
// (compute capability other than 9.0, or a build without sm_90a). attn_fwd_whole (the fused fresh + finalized
// forward) is checked the same way against fp64 and against the reset + block + finalize sequence.
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>

#include "kernels/cuda/attention/attn_fwd_sm90.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "tests/gpu/attention_test_util.h"

namespace rt::test {
namespace {

constexpr double kLog2e = 1.4426950408889634;

// Forces the forward variant for its scope (set_attn_variant_override).
// rows: fwd v5's query rows per CTA (64, 128 or 192 at D = 64; 0: the default choice).
struct ForcedFwdVariant : ScopedAttnVariant {
  explicit ForcedFwdVariant(const char* variant, int rows = 0) : ScopedAttnVariant(variant, nullptr) {
    cuda::AttnVariantOverride o = cuda::attn_variant_override();
    o.fwd_rows = rows;
    cuda::set_attn_variant_override(o);  // restored with the variant by ~ScopedAttnVariant
  }
};

struct WgCase {
  const char* name;
  int64_t B, Nq, Nk, H, Hkv;
  bool random_initial_state;     // else attn_state_reset
  std::vector<AttnMask> blocks;  // applied in order
};

struct Inputs {
  std::vector<float> q, k, v;    // (B,Nq,H,D), (B,Nk,Hkv,D) x2, bf16-rounded
  std::vector<float> acc, m, l;  // initial state (B,H,Nq,D), (B,H,Nq) x2; empty: reset
};

struct Outputs {
  std::vector<float> acc, m, l;  // final state
  std::vector<float> out, lse;   // (B,Nq,H,D), (B,H,Nq) after finalize
};

// A resumable state as an earlier block would leave it: a quarter of the rows unseen (m = -inf, l = 0,
// acc = 0), the others with m ~ N(1, 1) (log2 units), l in [0.5, 3], acc / l ~ N(0, 1).
void random_state(Inputs& in, int64_t rows, int64_t D, uint64_t seed) {
  const std::vector<float> u = random_vector(rows, seed), mm = random_vector(rows, seed + 1, 1.f, 1.f),
                           a = random_vector(rows * D, seed + 2);
  in.acc.assign(size_t(rows * D), 0.f);
  in.m.assign(size_t(rows), -INFINITY);
  in.l.assign(size_t(rows), 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    if (u[size_t(r)] < -0.674f) continue;  // P(N(0,1) < -0.674) = 1/4
    const float l = 0.5f + 2.5f * std::fabs(std::erf(u[size_t(r)]));
    in.m[size_t(r)] = mm[size_t(r)];
    in.l[size_t(r)] = l;
    for (int64_t d = 0; d < D; ++d) in.acc[size_t(r * D + d)] = a[size_t(r * D + d)] * l;
  }
}

Outputs run_gpu(const WgCase& c, int64_t D, const Inputs& in, const char* variant, int rows = 0) {
  const int64_t B = c.B, Nq = c.Nq, Nk = c.Nk, H = c.H, Hkv = c.Hkv;
  Buffer gq(gpu(), DType::bf16, {B, Nq, H, D}), gk(gpu(), DType::bf16, {B, Nk, Hkv, D}),
      gv(gpu(), DType::bf16, {B, Nk, Hkv, D}), gout(gpu(), DType::bf16, {B, Nq, H, D});
  Buffer gacc(gpu(), DType::f32, {B, H, Nq, D}), gm(gpu(), DType::f32, {B, H, Nq}), gl(gpu(), DType::f32, {B, H, Nq}),
      glse(gpu(), DType::f32, {B, H, Nq});
  upload(gq, in.q); upload(gk, in.k); upload(gv, in.v);
  AttnState st{gacc.t(), gm.t(), gl.t()};
  if (in.m.empty()) {
    poison(gacc); poison(gm); poison(gl);
    attn_state_reset(st);
  } else {
    upload(gacc, in.acc); upload(gm, in.m); upload(gl, in.l);
  }
  {
    ForcedFwdVariant forced(variant, rows);
    for (const AttnMask& mk : c.blocks) attn_fwd_block(gq.t(), gk.t(), gv.t(), st, mk);
  }
  poison(gout); poison(glse);
  attn_fwd_finalize(st, gout.t(), glse.t());
  return Outputs{download(gacc), download(gm), download(gl), download(gout), download(glse)};
}

// fp64 reference of the block sequence: per row, the running (max, sum, numerator) in the log2 domain,
// continued from the initial state by every block whose query range holds the row. touched[row] tells
// whether any block covered the row.
Outputs reference(const WgCase& c, int64_t D, const Inputs& in, std::vector<char>& touched) {
  const int64_t B = c.B, Nq = c.Nq, Nk = c.Nk, H = c.H, Hkv = c.Hkv, group = H / Hkv;
  const double scale2 = kLog2e / std::sqrt(double(D));
  Outputs r;
  r.out.assign(size_t(B * Nq * H * D), 0.f);
  r.lse.assign(size_t(B * H * Nq), -INFINITY);
  touched.assign(size_t(B * H * Nq), 0);
  std::vector<double> num(static_cast<size_t>(D)), xs;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Nq; ++i) {
        const int64_t row = (b * H + h) * Nq + i;
        double M = in.m.empty() ? -INFINITY : double(in.m[size_t(row)]);
        double L = in.m.empty() ? 0.0 : double(in.l[size_t(row)]);
        for (int64_t d = 0; d < D; ++d) num[size_t(d)] = M == -INFINITY ? 0.0 : double(in.acc[size_t(row * D + d)]);
        const float* qi = &in.q[size_t(((b * Nq + i) * H + h) * D)];
        for (const AttnMask& mk : c.blocks) {
          const int64_t qe = mk.q_end < 0 ? Nq : mk.q_end, ke = mk.k_end < 0 ? Nk : mk.k_end;
          if (i < mk.q_begin || i >= qe) continue;
          touched[size_t(row)] = 1;
          xs.clear();
          double mx = -INFINITY;
          for (int64_t j = mk.k_begin; j < ke; ++j) {
            if (mk.causal && mk.k_offset + j > mk.q_offset + i) {
              xs.push_back(-INFINITY);
              continue;
            }
            const float* kj = &in.k[size_t(((b * Nk + j) * Hkv + h / group) * D)];
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += double(qi[d]) * double(kj[d]);
            xs.push_back(dot * scale2);
            mx = std::max(mx, xs.back());
          }
          if (mx == -INFINITY) continue;
          const double Mn = std::max(M, mx);
          const double f = M == -INFINITY ? 0.0 : std::exp2(M - Mn);
          L *= f;
          for (double& x : num) x *= f;
          for (int64_t j = mk.k_begin; j < ke; ++j) {
            const double x = xs[size_t(j - mk.k_begin)];
            if (x == -INFINITY) continue;
            const double w = std::exp2(x - Mn);
            L += w;
            const float* vj = &in.v[size_t(((b * Nk + j) * Hkv + h / group) * D)];
            for (int64_t d = 0; d < D; ++d) num[size_t(d)] += w * double(vj[d]);
          }
          M = Mn;
        }
        if (L > 0) {
          r.lse[size_t(row)] = float((M + std::log2(L)) / kLog2e);
          for (int64_t d = 0; d < D; ++d) r.out[size_t(((b * Nq + i) * H + h) * D + d)] = float(num[size_t(d)] / L);
        }
      }
  return r;
}

bool any_nan(const std::vector<float>& x) {
  for (float v : x)
    if (std::isnan(v)) return true;
  return false;
}

// Rows (B,H,Nq) that no block covered must keep the initial state exactly.
int64_t untouched_rows_changed(const Outputs& o, const Inputs& in, const std::vector<char>& touched, int64_t D) {
  int64_t bad = 0;
  for (size_t row = 0; row < touched.size(); ++row) {
    if (touched[row]) continue;
    const float m0 = in.m.empty() ? -INFINITY : in.m[row], l0 = in.m.empty() ? 0.f : in.l[row];
    bool same = o.m[row] == m0 && o.l[row] == l0;
    for (int64_t d = 0; d < D; ++d) {
      const float a0 = in.m.empty() ? 0.f : in.acc[row * size_t(D) + size_t(d)];
      same = same && o.acc[row * size_t(D) + size_t(d)] == a0;
    }
    bad += same ? 0 : 1;
  }
  return bad;
}

// The kernel under test: forward variant ("4" or "5"), head dim, and fwd v5's query rows per CTA (0: the default
// choice, which for these test shapes is 128; 192: the three-warpgroup tile of D = 64).
struct FwdKernel {
  const char* variant;  // "4" or "5"
  int64_t D;
  int rows = 0;
};

void run_case(const WgCase& c, const FwdKernel& kern, uint64_t seed) {
  const int64_t D = kern.D;
  const std::string vn = std::string("v") + kern.variant + (kern.rows ? " rows " + std::to_string(kern.rows) : "");
  SCOPED_TRACE(std::string(c.name) + " " + vn + " D=" + std::to_string(D));
  Inputs in;
  in.q = bf16_rounded(random_vector(c.B * c.Nq * c.H * D, seed, 1.2f));
  in.k = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * D, seed + 1, 1.2f));
  in.v = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * D, seed + 2));
  if (c.random_initial_state) random_state(in, c.B * c.H * c.Nq, D, seed + 3);

  std::vector<char> touched;
  const Outputs ref = reference(c, D, in, touched);
  const Outputs vk = run_gpu(c, D, in, kern.variant, kern.rows);
  const Outputs v2 = run_gpu(c, D, in, "2");

  const double e_out = rel_error(vk.out, ref.out), e_lse = lse_max_abs_error(vk.lse, ref.lse);
  const double e_out_v2 = rel_error(vk.out, v2.out), e_lse_v2 = lse_max_abs_error(vk.lse, v2.lse),
               e_m_v2 = lse_max_abs_error(vk.m, v2.m), e_out_v2_ref = rel_error(v2.out, ref.out);
  std::cout << "[attn wgmma] " << c.name << " " << vn << " D=" << D << " out vs fp64 " << e_out
            << " (v2: " << e_out_v2_ref << ") lse " << e_lse << " | vs v2: out " << e_out_v2 << " lse " << e_lse_v2
            << " m " << e_m_v2;
  if (std::string(kern.variant) == "5" && cuda::attn_fwd_wgmma_supported(0, D)) {
    const Outputs v4 = run_gpu(c, D, in, "4");
    const double e_out_v4 = rel_error(vk.out, v4.out), e_lse_v4 = lse_max_abs_error(vk.lse, v4.lse),
                 e_m_v4 = lse_max_abs_error(vk.m, v4.m);
    std::cout << " | vs v4: out " << e_out_v4 << " lse " << e_lse_v4 << " m " << e_m_v4;
    EXPECT_LE(e_out_v4, 1e-2) << worst_mismatch(vk.out, v4.out);
    EXPECT_LE(e_lse_v4, 1e-4);
    EXPECT_LE(e_m_v4, 1e-4);
  }
  std::cout << "\n";
  EXPECT_FALSE(any_nan(vk.acc) || any_nan(vk.m) || any_nan(vk.l)) << "NaN in the " << vn << " state";
  EXPECT_LE(e_out, 1e-2) << worst_mismatch(vk.out, ref.out);
  EXPECT_LE(e_lse, 1e-4);
  EXPECT_LE(e_out_v2, 1e-2) << worst_mismatch(vk.out, v2.out);
  EXPECT_LE(e_lse_v2, 1e-4);
  EXPECT_LE(e_m_v2, 1e-4);
  EXPECT_EQ(untouched_rows_changed(vk, in, touched, D), 0) << "rows outside every query range were modified";
  // Rows with no visible key at all: LSE -inf and O exactly 0.
  for (size_t row = 0; row < ref.lse.size(); ++row)
    if (std::isinf(ref.lse[row])) {
      ASSERT_TRUE(std::isinf(vk.lse[row]) && vk.lse[row] < 0) << "row " << row;
    }
}

class CudaAttentionWgmma : public ::testing::TestWithParam<FwdKernel> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    const FwdKernel k = GetParam();
    const bool ok = std::string(k.variant) == "5" ? cuda::attn_fwd_ws_supported(0, k.D)
                                                  : cuda::attn_fwd_wgmma_supported(0, k.D);
    if (!ok) GTEST_SKIP() << "device 0 cannot run fwd v" << k.variant << " (needs compute capability 9.0 and an sm_90a build)";
  }
};

TEST_P(CudaAttentionWgmma, NonCausalGqaRaggedLengths) {
  run_case({"noncausal_gqa", 2, 300, 260, 4, 2, false, {mask(false, 0, 0)}}, GetParam(), 100);
}

TEST_P(CudaAttentionWgmma, CausalManyTiles) {
  // 6 query tiles x up to 6 key tiles: the software pipeline, the diagonal tiles, ragged ends.
  run_case({"causal_many_tiles", 1, 700, 700, 2, 1, false, {mask(true, 0, 0)}}, GetParam(), 200);
}

TEST_P(CudaAttentionWgmma, CausalRowsWithoutKeys) {
  // k_offset 40: query rows 0..39 see no key (LSE -inf, O 0).
  run_case({"causal_empty_rows", 1, 150, 260, 2, 1, false, {mask(true, 0, 40)}}, GetParam(), 300);
}

TEST_P(CudaAttentionWgmma, ResumeAcrossTwoKvBlocksFromRandomState) {
  run_case({"resume_two_blocks", 1, 512, 512, 4, 1, true,
            {mask(true, 0, 0, 0, -1, 0, 256), mask(true, 0, 0, 0, -1, 256, 512)}},
           GetParam(), 400);
}

TEST_P(CudaAttentionWgmma, ZigzagHalvesSubRangesAndOffsets) {
  // Later query half against an earlier key half (full), a diagonal half-block with global offsets, then
  // odd sub-ranges with diag 63; query rows 512..559 are in no block and must keep their random state.
  run_case({"zigzag_halves", 2, 560, 512, 2, 2, true,
            {mask(false, 0, 0, 256, 512, 0, 256), mask(true, 256, 256, 0, 256, 0, 256),
             mask(true, 1000, 937, 37, 300, 20, 290)}},
           GetParam(), 500);
}

TEST_P(CudaAttentionWgmma, LongKeyRangeRingStagesWrap) {
  // 17 key tiles (the K/V ring of v5 wraps many times), GQA group 3, keys past k_end inside the last tile and
  // inside the tensor, query range ending mid-tile, from a random state.
  run_case({"long_key_range", 1, 400, 2200, 3, 1, true, {mask(false, 0, 0, 5, 390, 3, 2150)}}, GetParam(), 700);
}

TEST_P(CudaAttentionWgmma, TinyBlocks) {
  // Fewer rows than one tile (a 64-token ring chunk): v5 hands such blocks to v4 (TMA box longer than the
  // tensor map's row extent).
  run_case({"tiny_blocks", 2, 100, 90, 2, 1, true, {mask(true, 64, 0, 0, -1, 0, 64), mask(false, 0, 0, 10, 80, 64, 90)}},
           GetParam(), 750);
}

TEST_P(CudaAttentionWgmma, CausalLongRowsGqa) {
  // 9 query tiles x up to 9 key tiles under the causal mask (diagonal tiles of both consumer warpgroups).
  run_case({"causal_long_gqa", 2, 1100, 1100, 4, 2, false, {mask(true, 0, 0)}}, GetParam(), 800);
}

TEST_P(CudaAttentionWgmma, NonCausalUnalignedKeyRange) {
  // 8 key tiles starting at an unaligned key 70, ending mid-tile.
  run_case({"noncausal_key_range", 1, 384, 1100, 2, 1, false, {mask(false, 0, 0, 0, -1, 70, 1030)}}, GetParam(),
           600);
}

// The fp64 reference above (random resumable state, overlapping blocks, offsets) against the CPU backend's
// f32 attention: guards the reference itself; needs no GPU.
TEST(CudaAttentionWgmmaReference, MatchesCpuBackend) {
  const WgCase c{"reference_vs_cpu", 1, 200, 180, 2, 1, true,
                 {mask(false, 0, 0, 40, 200, 0, 100), mask(true, 300, 290, 0, 150, 50, 180)}};
  const int64_t D = 64;
  Inputs in;
  in.q = bf16_rounded(random_vector(c.B * c.Nq * c.H * D, 7, 1.2f));
  in.k = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * D, 8, 1.2f));
  in.v = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * D, 9));
  random_state(in, c.B * c.H * c.Nq, D, 10);
  std::vector<char> touched;
  const Outputs ref = reference(c, D, in, touched);
  std::vector<float> acc = in.acc, m = in.m, l = in.l, out(ref.out.size()), lse(ref.lse.size());
  AttnState st{host_view(acc, {c.B, c.H, c.Nq, D}), host_view(m, {c.B, c.H, c.Nq}), host_view(l, {c.B, c.H, c.Nq})};
  RT_CPU_REFERENCE({
    for (const AttnMask& mk : c.blocks)
      attn_fwd_block(host_view(in.q, {c.B, c.Nq, c.H, D}), host_view(in.k, {c.B, c.Nk, c.Hkv, D}),
                     host_view(in.v, {c.B, c.Nk, c.Hkv, D}), st, mk);
    attn_fwd_finalize(st, host_view(out, {c.B, c.Nq, c.H, D}), host_view(lse, {c.B, c.H, c.Nq}));
  });
  std::cout << "[attn wgmma] reference vs cpu: out " << rel_error(out, ref.out) << " lse " << lse_max_abs_error(lse, ref.lse) << "\n";
  EXPECT_LE(rel_error(out, ref.out), 1e-5) << worst_mismatch(out, ref.out);
  EXPECT_LE(lse_max_abs_error(lse, ref.lse), 1e-5);
}

// Two key blocks in sequence leave the same state as one block over both (up to the bf16 rounding of P,
// which is relative to the running max at the time): v5 and v4, causal, from a random state.
TEST_P(CudaAttentionWgmma, TwoKeyBlocksEqualOne) {
  const FwdKernel kern = GetParam();
  const int64_t D = kern.D;
  const WgCase two{"two_blocks", 1, 640, 640, 2, 1, true,
                   {mask(true, 0, 0, 0, -1, 0, 300), mask(true, 0, 0, 0, -1, 300, 640)}};
  WgCase one = two;
  one.name = "one_block";
  one.blocks = {mask(true, 0, 0, 0, -1, 0, 640)};
  Inputs in;
  in.q = bf16_rounded(random_vector(two.B * two.Nq * two.H * D, 900, 1.2f));
  in.k = bf16_rounded(random_vector(two.B * two.Nk * two.Hkv * D, 901, 1.2f));
  in.v = bf16_rounded(random_vector(two.B * two.Nk * two.Hkv * D, 902));
  random_state(in, two.B * two.H * two.Nq, D, 903);
  const Outputs a = run_gpu(two, D, in, kern.variant, kern.rows), b = run_gpu(one, D, in, kern.variant, kern.rows);
  std::cout << "[attn wgmma] two blocks vs one v" << kern.variant << " D=" << D << ": out " << rel_error(a.out, b.out)
            << " lse " << lse_max_abs_error(a.lse, b.lse) << "\n";
  EXPECT_LE(rel_error(a.out, b.out), 5e-3) << worst_mismatch(a.out, b.out);
  EXPECT_LE(lse_max_abs_error(a.lse, b.lse), 1e-4);
  EXPECT_LE(lse_max_abs_error(a.m, b.m), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaAttentionWgmma,
                         ::testing::Values(FwdKernel{"4", 64}, FwdKernel{"4", 128}, FwdKernel{"5", 64},
                                           FwdKernel{"5", 64, 192}, FwdKernel{"5", 64, 64},
                                           FwdKernel{"5", 128}, FwdKernel{"5", 128, 64}),
                         [](const auto& info) {
                           return std::string("v") + info.param.variant + "_D" + std::to_string(info.param.D) +
                                  (info.param.rows ? "_rows" + std::to_string(info.param.rows) : "");
                         });

// A fused-form case: random bf16 inputs, the fp64 reference and the reset + blocks + finalize sequence of the
// kernel under test, and the GPU buffers for the fused call: inputs uploaded, state and outputs NaN-poisoned.
struct FusedCase {
  Inputs in;
  Outputs ref, seq;
  Buffer gq, gk, gv, gout, gacc, gm, gl, glse;  // (B,Nq,H,D), (B,Nk,Hkv,D) x2, (B,Nq,H,D) bf16; state, lse f32
  FusedCase(const WgCase& c, const FwdKernel& kern, uint64_t seed)
      : gq(gpu(), DType::bf16, {c.B, c.Nq, c.H, kern.D}), gk(gpu(), DType::bf16, {c.B, c.Nk, c.Hkv, kern.D}),
        gv(gpu(), DType::bf16, {c.B, c.Nk, c.Hkv, kern.D}), gout(gpu(), DType::bf16, {c.B, c.Nq, c.H, kern.D}),
        gacc(gpu(), DType::f32, {c.B, c.H, c.Nq, kern.D}), gm(gpu(), DType::f32, {c.B, c.H, c.Nq}),
        gl(gpu(), DType::f32, {c.B, c.H, c.Nq}), glse(gpu(), DType::f32, {c.B, c.H, c.Nq}) {
    const int64_t D = kern.D;
    in.q = bf16_rounded(random_vector(c.B * c.Nq * c.H * D, seed, 1.2f));
    in.k = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * D, seed + 1, 1.2f));
    in.v = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * D, seed + 2));
    std::vector<char> touched;
    ref = reference(c, D, in, touched);
    seq = run_gpu(c, D, in, kern.variant, kern.rows);
    upload(gq, in.q); upload(gk, in.k); upload(gv, in.v);
    poison(gacc); poison(gm); poison(gl); poison(gout); poison(glse);
  }
  AttnState state() { return AttnState{gacc.t(), gm.t(), gl.t()}; }
};

// attn_fwd_whole (fresh state, one block, finalized in the kernel where fwd v5 applies) against the fp64
// reference and against the reset + attn_fwd_block + finalize sequence of the same variant, into NaN-poisoned
// out / lse; the scratch state is poisoned too (the fused kernel must not read it).
void run_whole_case(const WgCase& c, const FwdKernel& kern, uint64_t seed) {
  const int64_t D = kern.D, Nq = c.Nq, H = c.H;
  SCOPED_TRACE(std::string(c.name) + " whole v" + kern.variant + " D=" + std::to_string(D));
  FusedCase fc(c, kern, seed);
  const Outputs &ref = fc.ref, &seq = fc.seq;
  AttnState scratch = fc.state();
  {
    ForcedFwdVariant forced(kern.variant, kern.rows);
    attn_fwd_whole(fc.gq.t(), fc.gk.t(), fc.gv.t(), scratch, c.blocks.at(0), fc.gout.t(), fc.glse.t());
  }
  const std::vector<float> out = download(fc.gout), lse = download(fc.glse);
  const double e_out = rel_error(out, ref.out), e_lse = lse_max_abs_error(lse, ref.lse);
  const double e_seq = rel_error(out, seq.out), e_lse_seq = lse_max_abs_error(lse, seq.lse);
  std::cout << "[attn whole] " << c.name << " v" << kern.variant << " D=" << D << " out vs fp64 " << e_out << " lse "
            << e_lse << " | vs sequence: out " << e_seq << " lse " << e_lse_seq << "\n";
  EXPECT_FALSE(any_nan(out) || any_nan(lse)) << "NaN in out / lse";
  EXPECT_LE(e_out, 1e-2) << worst_mismatch(out, ref.out);
  EXPECT_LE(e_lse, 1e-4);
  EXPECT_LE(e_seq, 2e-3) << worst_mismatch(out, seq.out);  // O / l as O * (1/l): bf16 rounding only
  EXPECT_LE(e_lse_seq, 1e-5);
  for (size_t row = 0; row < ref.lse.size(); ++row)  // rows with no visible key: LSE -inf, O 0
    if (std::isinf(ref.lse[row])) {
      ASSERT_TRUE(std::isinf(lse[row]) && lse[row] < 0) << "row " << row;
      const size_t b = row / size_t(H * Nq), h = (row / size_t(Nq)) % size_t(H), i = row % size_t(Nq);
      for (int64_t d = 0; d < D; ++d)
        ASSERT_EQ(out[((b * size_t(Nq) + i) * size_t(H) + h) * size_t(D) + size_t(d)], 0.f) << "row " << row;
    }
}

TEST_P(CudaAttentionWgmma, WholeForwardNonCausalGqa) {
  run_whole_case({"whole_noncausal_gqa", 2, 300, 260, 4, 2, false, {mask(false, 0, 0)}}, GetParam(), 1000);
}

TEST_P(CudaAttentionWgmma, WholeForwardCausalWithQueryTilesThatSeeNoKey) {
  // k_offset 300: query rows 0..299 see no key, so the first two 128-row tiles of v5 have nothing to do and
  // must still write O = 0 and LSE = -inf.
  run_whole_case({"whole_causal_empty_tiles", 1, 700, 700, 2, 1, false, {mask(true, 0, 300)}}, GetParam(), 1100);
}

TEST_P(CudaAttentionWgmma, WholeForwardPartialRangesAndShortBlocks) {
  // A query sub-range (extra CTAs write O = 0, LSE = -inf for the rows outside it) and a 100-row block (under
  // one tile: the sequence runs).
  run_whole_case({"whole_sub_range", 1, 400, 400, 2, 1, false, {mask(true, 0, 0, 37, 300, 0, 400)}}, GetParam(), 1200);
  run_whole_case({"whole_short", 2, 100, 90, 2, 1, false, {mask(false, 0, 0)}}, GetParam(), 1300);
}

// A ring rank's steps with the fused ends: attn_fwd_block_first (blocks[0], into a NaN-poisoned state: it must
// not read it), attn_fwd_block for the middle blocks, attn_fwd_block_last (the last block, into NaN-poisoned out /
// lse). Against the fp64 reference and, bit for bit, against reset + the blocks + finalize of the same variant
// (the fused kernel does the same float operations in the same order).
void run_ends_case(const WgCase& c, const FwdKernel& kern, uint64_t seed) {
  const int64_t D = kern.D;
  SCOPED_TRACE(std::string(c.name) + " ends v" + kern.variant + " D=" + std::to_string(D));
  ASSERT_GE(c.blocks.size(), 2u);
  FusedCase fc(c, kern, seed);
  const Outputs &ref = fc.ref, &seq = fc.seq;
  AttnState st = fc.state();
  {
    ForcedFwdVariant forced(kern.variant, kern.rows);
    const Tensor q = fc.gq.t(), k = fc.gk.t(), v = fc.gv.t();
    attn_fwd_block_first(q, k, v, st, c.blocks.front());
    for (size_t i = 1; i + 1 < c.blocks.size(); ++i) attn_fwd_block(q, k, v, st, c.blocks[i]);
    attn_fwd_block_last(q, k, v, st, c.blocks.back(), fc.gout.t(), fc.glse.t());
  }
  const std::vector<float> out = download(fc.gout), lse = download(fc.glse);
  const double e_out = rel_error(out, ref.out), e_lse = lse_max_abs_error(lse, ref.lse);
  int64_t out_diff = 0, lse_diff = 0;  // elements that differ from the sequence's (NaN counts as different)
  for (size_t i = 0; i < out.size(); ++i) out_diff += out[i] == seq.out[i] ? 0 : 1;
  for (size_t i = 0; i < lse.size(); ++i) lse_diff += lse[i] == seq.lse[i] ? 0 : 1;
  std::cout << "[attn ring ends] " << c.name << " v" << kern.variant << " D=" << D << " out vs fp64 " << e_out
            << " lse " << e_lse << " | elements unlike the sequence: out " << out_diff << " lse " << lse_diff << "\n";
  EXPECT_FALSE(any_nan(out) || any_nan(lse)) << "NaN in out / lse";
  EXPECT_LE(e_out, 1e-2) << worst_mismatch(out, ref.out);
  EXPECT_LE(e_lse, 1e-4);
  EXPECT_EQ(out_diff, 0) << worst_mismatch(out, seq.out);
  EXPECT_EQ(lse_diff, 0);
}

TEST_P(CudaAttentionWgmma, RingEndsZigzagSteps) {
  // A zigzag rank of 512 tokens: the causal diagonal block, a half-key step (keys [0, 256)), then a half-query
  // step (queries [256, 512)) last: rows [0, 256) are finalized from the state by the extra CTAs.
  run_ends_case({"ends_zigzag", 1, 512, 512, 4, 2, false,
                 {mask(true, 0, 0), mask(false, 0, 0, 0, -1, 0, 256), mask(false, 0, 0, 256, 512, 0, -1)}},
                GetParam(), 1400);
}

TEST_P(CudaAttentionWgmma, RingEndsRowsWithoutKeysAndSubRanges) {
  // First: k_offset 300, so the first query tiles see no key and write a reset state; rows outside [37, 650)
  // are reset by the extra CTAs. Middle: every key. Last: a sub-range whose first tile sees no key (finalized
  // from the state) and rows past 600 finalized by the extra CTAs.
  run_ends_case({"ends_empty_tiles", 2, 700, 700, 2, 1, false,
                 {mask(true, 0, 300, 37, 650, 0, -1), mask(false, 0, 0), mask(true, 0, 200, 0, 600, 0, -1)}},
                GetParam(), 1500);
}

TEST_P(CudaAttentionWgmma, RingEndsShortBlocksRunTheSequence) {
  // 100-row blocks (under one 128-row TMA box): both ends run the op sequence.
  run_ends_case({"ends_short", 2, 100, 100, 2, 1, false, {mask(true, 0, 0), mask(false, 0, 0)}}, GetParam(), 1600);
}

}  // namespace
}  // namespace rt::test
