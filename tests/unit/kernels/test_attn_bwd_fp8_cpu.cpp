// attn_bwd_block_fp8 on the CPU (kernels/attn_fp8.h): dV, dQ, dK with E4M3 operands against fp64, on N(0,1) inputs
// and on inputs with outlier channels (4 channels of Q and K x20), causal and packed documents, GQA (H 4, Hkv 2),
// D 64 and 128, B 2; the op against an fp64 emulation of its own recipe built from kernels/fp8.h's rounding (every
// operand rounded as fp8.h rounds it, each in its scale group); the quantizers bit for bit; the refusals.
//
// Measured 2026-12-03 (B 2, 448 rows, H 4, Hkv 2, this file's seeds; relative RMS against fp64, dQ / dK / dV):
//   N(0,1)    causal d64  3.76e-2 / 3.72e-2 / 3.63e-2    docs d64  3.76e-2 / 3.71e-2 / 3.68e-2
//             causal d128 3.70e-2 / 3.61e-2 / 3.71e-2    docs d128 3.68e-2 / 3.64e-2 / 3.61e-2
//   outliers  causal d64  5.06e-2 / 3.21e-2 / 2.77e-2    docs d64  4.98e-2 / 3.18e-2 / 2.78e-2
//             causal d128 5.13e-2 / 3.31e-2 / 2.78e-2    docs d128 4.68e-2 / 3.45e-2 / 2.81e-2
//   against the fp64 emulation of the recipe: 7e-8 to 1.2e-4 (codes flipped at rounding boundaries by f32 sums).
// The numpy study (bench/fp8_attention_accuracy.py, bench/NOTES.md "FP8 attention numerics, emulated") predicts
// 3.6-3.8e-2 on N(0,1): the C++ agrees (run at 512 rows: 3.60-3.81e-2). On the outliers it gives dQ 5.1-5.8e-2
// at 512 rows (above the 4e-2: a known miss, bounded here at 8e-2 against regressions), dK 3.3-3.5e-2 and
// dV 2.8e-2 as here; the C++'s dQ 4.7-5.1e-2 lies within ~10% of that spread (the study draws the outlier channels
// at random, this file fixes them; its inputs are bf16-rounded and its gradients stored as bf16, these are f32).
// Checked to fail: P cast unscaled (dV 6.1e-2 against fp64, 6.1e-2 against the emulation); K left in f32 for dQ
// (dQ 2.7e-2 off the emulation).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/attn_fp8.h"
#include "kernels/fp8.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::AttnShape;
using test::HostTensor;

constexpr double kGradGoal = 4e-2;      // the bound on dQ, dK, dV (N(0,1) inputs)
constexpr double kQuantizedFloor = 1e-2;  // below it the operands were not quantized (f32 gives ~1e-6)
constexpr double kEmulationTol = 5e-4;  // the op against the fp64 emulation of its recipe (measured <= 1.2e-4: a code flipped at a
                                        // rounding boundary by f32 vs fp64 P or dS; a wrong scale group: ~3e-2)

HostTensor normal_f32(const std::vector<int64_t>& dims, uint64_t seed) {
  HostTensor h = test::f32(dims);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (int64_t k = 0; k < h.numel(); ++k) h[k] = dist(gen);
  return h;
}

// Channels `ch` of every head of x (B,N,heads,D) multiplied by `factor`.
void scale_channels(HostTensor& x, const std::vector<int64_t>& ch, float factor) {
  const int64_t D = x.t.shape[3], rows = x.numel() / D;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c : ch) x[r * D + c] *= factor;
}

// Positions 0..N-1 in order, cut into 4 documents of random lengths per sample (3 distinct cuts).
struct Documents {
  std::vector<int64_t> pos, start;  // (B, N) each
  Documents(int64_t B, int64_t N, uint64_t seed) : pos(size_t(B * N)), start(size_t(B * N)) {
    std::mt19937_64 gen(seed);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> cuts;
      while (cuts.size() < 3) {
        const int64_t c = 1 + int64_t(gen() % uint64_t(N - 1));
        if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
      }
      std::sort(cuts.begin(), cuts.end());
      int64_t doc_start = 0;
      for (int64_t i = 0; i < N; ++i) {
        if (std::find(cuts.begin(), cuts.end(), i) != cuts.end()) doc_start = i;
        pos[size_t(b * N + i)] = i;
        start[size_t(b * N + i)] = doc_start;
      }
    }
  }
  AttnMask mask(int64_t N) const {
    AttnMask m;
    m.docs.q_pos = pos.data();
    m.docs.q_doc_start = start.data();
    m.docs.k_pos = pos.data();
    m.docs.q_stride = m.docs.k_stride = N;
    return m;
  }
};

struct Inputs {
  HostTensor q, k, v, dout, out, lse, delta;
};

// Random q, k, v, dout (N(0,1); outliers: 4 channels of q and k x20) and the CPU forward's out, lse and delta.
Inputs make_inputs(const AttnShape& s, bool outliers, const AttnMask& mask, uint64_t seed) {
  Inputs in{normal_f32({s.B, s.Nq, s.H, s.D}, seed), normal_f32({s.B, s.Nk, s.Hkv, s.D}, seed + 1),
            normal_f32({s.B, s.Nk, s.Hkv, s.D}, seed + 2), normal_f32({s.B, s.Nq, s.H, s.D}, seed + 3),
            test::f32({s.B, s.Nq, s.H, s.D}), test::f32({s.B, s.H, s.Nq}), test::f32({s.B, s.H, s.Nq})};
  if (outliers) {
    const std::vector<int64_t> ch = {3, s.D / 4 + 1, s.D / 2 + 7, s.D - 2};
    scale_channels(in.q, ch, 20.f);
    scale_channels(in.k, ch, 20.f);
  }
  HostTensor acc = test::f32({s.B, s.H, s.Nq, s.D}), m = test::f32({s.B, s.H, s.Nq}), l = test::f32({s.B, s.H, s.Nq});
  AttnState st{acc.t, m.t, l.t};
  attn_fwd_whole(in.q, in.k, in.v, st, mask, in.out, in.lse);
  attn_bwd_delta(in.out, in.dout, in.delta);
  return in;
}

struct Grads {
  HostTensor dq, dk, dv;
};

// The FP8 op (fp8 = true) or the f32 attn_bwd_block_fresh; dk, dv poisoned, dq (an accumulator) zeroed.
Grads run_backward(const AttnShape& s, const Inputs& in, const AttnMask& mask, bool fp8) {
  Grads g{test::f32({s.B, s.Nq, s.H, s.D}), test::f32({s.B, s.Nk, s.Hkv, s.D}), test::f32({s.B, s.Nk, s.Hkv, s.D})};
  test::poison(g.dk);
  test::poison(g.dv);
  fill(g.dq, 0.f);
  if (fp8)
    attn_bwd_block_fresh_fp8(in.q, in.k, in.v, in.dout, in.lse, in.delta, g.dq, g.dk, g.dv, mask);
  else
    attn_bwd_block_fresh(in.q, in.k, in.v, in.dout, in.lse, in.delta, g.dq, g.dk, g.dv, mask);
  return g;
}

struct Reference {
  std::vector<double> dq, dk, dv;
};

// The exact gradients: fp64 forward and backward on the f32 inputs.
Reference exact_gradients(const AttnShape& s, const Inputs& in, const AttnMask& mask) {
  std::vector<double> out_ref, lse_ref;
  test::attention_forward_ref(s, in.q.f(), in.k.f(), in.v.f(), mask, out_ref, lse_ref);
  std::vector<double> delta_ref(size_t(s.B * s.H * s.Nq), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.Nq; ++i)
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t c = 0; c < s.D; ++c) {
          const int64_t o = ((b * s.Nq + i) * s.H + h) * s.D + c;
          delta_ref[size_t((b * s.H + h) * s.Nq + i)] += out_ref[size_t(o)] * double(in.dout[o]);
        }
  Reference r;
  test::attention_backward_ref(s, in.q.f(), in.k.f(), in.v.f(), in.dout.f(), lse_ref.data(), delta_ref.data(), mask,
                               r.dq, r.dk, r.dv);
  return r;
}

// ---- the recipe emulated in fp64 from kernels/fp8.h's functions alone ----

// One head slice (rows of x at x + r * stride, D columns) dequantized per 128-row block: code * (1 / s).
std::vector<double> dequantized_rows(const float* x, int64_t rows, int64_t stride, int64_t D) {
  std::vector<double> out(size_t(rows * D));
  for (int64_t r0 = 0; r0 < rows; r0 += 128) {
    const int64_t r1 = std::min(rows, r0 + 128);
    float amax = 0.f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < D; ++c) amax = std::max(amax, std::fabs(x[r * stride + c]));
    const float s = fp8_scale_from_amax(amax), f = fp8_factor_from_scale(s);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < D; ++c)
        out[size_t(r * D + c)] = double(e4m3_to_float(float_to_e4m3(x[r * stride + c] * s))) * double(f);
  }
  return out;
}

// The op's algorithm with fp64 sums: P x448, dS per 128 x 128 tile (tiles from row 0: the mask covers every row),
// Q, K, dO per 128-row block of a head; P, dS, S, dP from the f32 inputs and the forward's f32 lse and delta.
Reference emulated_gradients(const AttnShape& s, const Inputs& in, const AttnMask& mask) {
  const double scale = 1.0 / std::sqrt(double(s.D));
  const int64_t g = s.H / s.Hkv, q_row = s.H * s.D, k_row = s.Hkv * s.D;
  Reference r{std::vector<double>(size_t(in.q.numel())), std::vector<double>(size_t(in.k.numel())),
              std::vector<double>(size_t(in.k.numel()))};
  std::vector<double> p(size_t(s.Nq * s.Nk)), ds(size_t(s.Nq * s.Nk));  // (Nq, Nk) of one head
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t qoff = (b * s.Nq * s.H + h) * s.D, koff = (b * s.Nk * s.Hkv + h / g) * s.D;
      const std::vector<double> q8 = dequantized_rows(in.q.f() + qoff, s.Nq, q_row, s.D);
      const std::vector<double> do8 = dequantized_rows(in.dout.f() + qoff, s.Nq, q_row, s.D);
      const std::vector<double> k8 = dequantized_rows(in.k.f() + koff, s.Nk, k_row, s.D);
      for (int64_t i = 0; i < s.Nq; ++i) {
        const double L = in.lse[(b * s.H + h) * s.Nq + i], dl = in.delta[(b * s.H + h) * s.Nq + i];
        for (int64_t j = 0; j < s.Nk; ++j) {
          double dot = 0, dp = 0;
          for (int64_t c = 0; c < s.D; ++c) {
            dot += double(in.q[qoff + i * q_row + c]) * double(in.k[koff + j * k_row + c]);
            dp += double(in.dout[qoff + i * q_row + c]) * double(in.v[koff + j * k_row + c]);
          }
          const bool vis = L != -INFINITY && test::ref_visible(mask, b, i, j);
          const double pij = vis ? std::exp(dot * scale - L) : 0.0;
          p[size_t(i * s.Nk + j)] = pij;
          ds[size_t(i * s.Nk + j)] = pij * (dp - dl) * scale;
        }
      }
      for (int64_t i0 = 0; i0 < s.Nq; i0 += 128)
        for (int64_t j0 = 0; j0 < s.Nk; j0 += 128) {
          const int64_t i1 = std::min(s.Nq, i0 + 128), j1 = std::min(s.Nk, j0 + 128);
          float amax = 0.f;
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = j0; j < j1; ++j) amax = std::max(amax, std::fabs(float(ds[size_t(i * s.Nk + j)])));
          const float ss = fp8_scale_from_amax(amax), sf = fp8_factor_from_scale(ss);
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = j0; j < j1; ++j) {
              const double p8 = double(e4m3_to_float(float_to_e4m3(float(p[size_t(i * s.Nk + j)]) * 448.f))) / 448.0;
              const double ds8 =
                  double(e4m3_to_float(float_to_e4m3(float(ds[size_t(i * s.Nk + j)]) * ss))) * double(sf);
              for (int64_t c = 0; c < s.D; ++c) {
                r.dv[size_t(koff + j * k_row + c)] += p8 * do8[size_t(i * s.D + c)];
                r.dk[size_t(koff + j * k_row + c)] += ds8 * q8[size_t(i * s.D + c)];
                r.dq[size_t(qoff + i * q_row + c)] += ds8 * k8[size_t(j * s.D + c)];
              }
            }
        }
    }
  return r;
}

// ---- accuracy against fp64 ----

struct Fp8Case {
  std::string name;
  int64_t D;
  bool outliers, documents;
};
void PrintTo(const Fp8Case& c, std::ostream* os) { *os << c.name; }

class AttnBwdFp8Cpu : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(AttnBwdFp8Cpu, GradientsAgainstFp64AndTheEmulatedRecipe) {
  const Fp8Case& c = GetParam();
  const AttnShape s{2, 448, 448, 4, 2, c.D};  // 3.5 row blocks: the last block and tile are partial
  const Documents docs(s.B, s.Nq, 77 + uint64_t(c.D));
  AttnMask mask;
  if (c.documents)
    mask = docs.mask(s.Nq);
  else
    mask.causal = true;
  const Inputs in = make_inputs(s, c.outliers, mask, 1000 + uint64_t(c.D) + (c.outliers ? 10 : 0));
  const Grads g = run_backward(s, in, mask, /*fp8=*/true);
  ASSERT_FALSE(test::any_nan(g.dq) || test::any_nan(g.dk) || test::any_nan(g.dv)) << "NaN in the FP8 backward";
  const Reference exact = exact_gradients(s, in, mask);
  const double eq = test::rel_err(g.dq, exact.dq), ek = test::rel_err(g.dk, exact.dk),
               ev = test::rel_err(g.dv, exact.dv);
  std::printf("[fp8 attention bwd] %s: dQ %.3e dK %.3e dV %.3e (relative RMS against fp64)\n", c.name.c_str(), eq, ek,
              ev);
  if (!c.outliers) {
    EXPECT_LE(eq, kGradGoal);
    EXPECT_LE(ek, kGradGoal);
    EXPECT_LE(ev, kGradGoal);
  } else {  // the study's known miss on dQ (5.1-6.2e-2); dK and dV within the goal
    EXPECT_LE(eq, 8e-2);
    EXPECT_LE(ek, kGradGoal);
    EXPECT_LE(ev, kGradGoal);
  }
  // Quantization happened: each gradient sits at the E4M3 floor, not at f32's.
  EXPECT_GT(eq, kQuantizedFloor);
  EXPECT_GT(ek, kQuantizedFloor);
  EXPECT_GT(ev, kQuantizedFloor);
  const Grads f32 = run_backward(s, in, mask, /*fp8=*/false);
  EXPECT_LT(test::rel_err(f32.dq, exact.dq), 1e-4) << "the f32 backward on the same inputs";
  // The op is its recipe: fp8.h's rounding of each operand in its scale group, f32 sums.
  const Reference emu = emulated_gradients(s, in, mask);
  const double mq = test::rel_err(g.dq, emu.dq), mk = test::rel_err(g.dk, emu.dk), mv = test::rel_err(g.dv, emu.dv);
  std::printf("[fp8 attention bwd] %s: against the fp64 emulation of the recipe dQ %.3e dK %.3e dV %.3e\n",
              c.name.c_str(), mq, mk, mv);
  EXPECT_LT(mq, kEmulationTol);
  EXPECT_LT(mk, kEmulationTol);
  EXPECT_LT(mv, kEmulationTol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttnBwdFp8Cpu,
                         ::testing::Values(Fp8Case{"normal_causal_d64", 64, false, false},
                                           Fp8Case{"normal_docs_d64", 64, false, true},
                                           Fp8Case{"normal_causal_d128", 128, false, false},
                                           Fp8Case{"normal_docs_d128", 128, false, true},
                                           Fp8Case{"outlier_causal_d64", 64, true, false},
                                           Fp8Case{"outlier_docs_d64", 64, true, true},
                                           Fp8Case{"outlier_causal_d128", 128, true, false},
                                           Fp8Case{"outlier_docs_d128", 128, true, true}),
                         [](const ::testing::TestParamInfo<Fp8Case>& info) { return info.param.name; });

// ---- key blocks, ranges ----

// Keys in two calls split on a row block ([0, 128), [128, N)) give the one call's gradients: the scale groups are
// the tensor's row blocks, not the call's range. A key range leaves the rows outside it at zero in the fresh op.
TEST(AttnBwdFp8CpuBlocks, KeySplitOnARowBlockEqualsOneCall) {
  const AttnShape s{2, 320, 320, 4, 2, 64};
  AttnMask causal;
  causal.causal = true;
  const Inputs in = make_inputs(s, false, causal, 31);
  const Grads whole = run_backward(s, in, causal, true);
  HostTensor dq = test::f32({s.B, s.Nq, s.H, s.D}), dk = test::f32({s.B, s.Nk, s.Hkv, s.D}),
             dv = test::f32({s.B, s.Nk, s.Hkv, s.D});
  fill(dq, 0.f);
  fill(dk, 0.f);
  fill(dv, 0.f);
  for (int64_t cut : {0, 128}) {
    AttnMask part = causal;
    part.k_begin = cut;
    part.k_end = cut == 0 ? 128 : -1;
    attn_bwd_block_fp8(in.q, in.k, in.v, in.dout, in.lse, in.delta, dq, dk, dv, part);
  }
  EXPECT_LT(test::rel_err(dq, whole.dq.to_double()), 1e-6);  // dQ's tile sums in another order
  EXPECT_EQ(dk.to_double(), whole.dk.to_double());
  EXPECT_EQ(dv.to_double(), whole.dv.to_double());

  AttnMask tail = causal;  // fresh over keys [128, N): rows [0, 128) of dk, dv zero, the rest as the split's part
  tail.k_begin = 128;
  const Grads t = run_backward(s, in, tail, true);
  ASSERT_FALSE(test::any_nan(t.dk) || test::any_nan(t.dv));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t j = 0; j < 128; ++j)
      for (int64_t c = 0; c < s.Hkv * s.D; ++c) {
        ASSERT_EQ(t.dk[(b * s.Nk + j) * s.Hkv * s.D + c], 0.f);
        ASSERT_EQ(t.dv[(b * s.Nk + j) * s.Hkv * s.D + c], 0.f);
      }
}

// ---- the quantizers, bit for bit ----

TEST(AttnBwdFp8CpuQuantizers, E4M3ValuesMatchFp8H) {
  for (int c = 0; c < 256; ++c) {
    const float a = e4m3_value(uint8_t(c)), b = e4m3_to_float(uint8_t(c));
    if (std::isnan(b))
      EXPECT_TRUE(std::isnan(a)) << c;
    else
      EXPECT_EQ(a, b) << c;
  }
}

TEST(AttnBwdFp8CpuQuantizers, RowBlocksRoundAsFp8H) {
  // 130 rows x 64 of a head (row stride 128: another head between): block 0 has amax 2 (s = 224), block 1 (rows
  // 128, 129) amax 0.5 (s = 896).
  const int64_t rows = 130, D = 64, stride = 128;
  std::vector<float> x(size_t(rows * stride), 0.f);
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < D; ++c) x[size_t(r * stride + c)] = (r < 128 ? 1.9f : 0.45f) * u(gen);
  x[size_t(5 * stride + 7)] = -2.f;        // block 0's amax: -448 after scaling, code 0xFE
  x[size_t(6 * stride + 1)] = 1.f / 224;   // 1.0 after scaling: code 0x38
  x[size_t(7 * stride + 2)] = 1e-3f / 224;  // 1e-3: subnormal, 2^-9 steps: code 0x01 (1e-3 / 2^-9 = 0.512 -> 1)
  x[size_t(129 * stride + 63)] = 0.5f;     // block 1's amax: 448, code 0x7E
  std::vector<float> values(size_t(rows * D)), factors(2);
  attn_fp8_quantize_row_blocks(x.data(), rows, stride, D, values.data(), factors.data());
  EXPECT_EQ(factors[0], fp8_factor_from_scale(224.f));
  EXPECT_EQ(factors[1], fp8_factor_from_scale(896.f));
  EXPECT_EQ(values[size_t(5 * D + 7)], -448.f);
  EXPECT_EQ(float_to_e4m3(x[size_t(5 * stride + 7)] * 224.f), 0xFE);
  EXPECT_EQ(values[size_t(6 * D + 1)], 1.f);
  EXPECT_EQ(float_to_e4m3(x[size_t(6 * stride + 1)] * 224.f), 0x38);
  EXPECT_EQ(values[size_t(7 * D + 2)], 0.001953125f);  // 2^-9
  EXPECT_EQ(values[size_t(129 * D + 63)], 448.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < D; ++c) {
      const float s = r < 128 ? 224.f : 896.f;
      ASSERT_EQ(values[size_t(r * D + c)], e4m3_to_float(float_to_e4m3(x[size_t(r * stride + c)] * s)))
          << r << "," << c;
    }
  // A NaN makes its block's factor NaN (fp8.h's bad-tensor signal) and leaves the other block alone.
  x[size_t(3 * stride)] = NAN;
  attn_fp8_quantize_row_blocks(x.data(), rows, stride, D, values.data(), factors.data());
  EXPECT_TRUE(fp8_factor_is_bad(factors[0]));
  EXPECT_EQ(factors[1], fp8_factor_from_scale(896.f));
}

TEST(AttnBwdFp8CpuQuantizers, TilesRoundAsFp8H) {
  // P x448: 1 -> 448 (0x7E), 1/448 -> 1 (0x38), 2^-9 / 448 -> the smallest subnormal, 0.4 of it -> 0, 1 + 2^-20 (exp2's rounding above 1) saturates to 448.
  std::vector<float> p = {1.f, 1.f / 448, 0.001953125f / 448, 0.00078125f / 448, 1.f + 9.5367431640625e-7f, 0.3f};
  const std::vector<float> x = p;
  attn_fp8_quantize_tile(p.data(), 2, 3, 3, kAttnFp8PScale);
  EXPECT_EQ(p[0], 448.f);
  EXPECT_EQ(p[1], 1.f);
  EXPECT_EQ(p[2], 0.001953125f);
  EXPECT_EQ(p[3], 0.f);
  EXPECT_EQ(p[4], 448.f);
  for (size_t k = 0; k < p.size(); ++k) EXPECT_EQ(p[k], e4m3_to_float(float_to_e4m3(x[k] * 448.f))) << k;
  // dS: the tile's amax (NaN-propagating) gives its scale.
  std::vector<float> ds = {0.25f, -0.5f, 0.1f, 0.f};
  EXPECT_EQ(attn_fp8_tile_amax(ds.data(), 2, 2, 2), 0.5f);
  ds[2] = NAN;
  EXPECT_TRUE(std::isnan(attn_fp8_tile_amax(ds.data(), 2, 2, 2)));
  EXPECT_EQ(attn_fp8_tile_amax(ds.data(), 1, 2, 2), 0.5f);  // the NaN is outside a 1 x 2 tile
}

// ---- refusals ----

TEST(AttnBwdFp8CpuChecks, RefusesOtherHeadDimsAndCudaTensors) {
  const AttnShape s{1, 16, 16, 2, 1, 32};
  HostTensor q = test::random_f32({s.B, s.Nq, s.H, s.D}, 1), k = test::random_f32({s.B, s.Nk, s.Hkv, s.D}, 2);
  HostTensor lse = test::f32({s.B, s.H, s.Nq}), dq = test::f32({s.B, s.Nq, s.H, s.D});
  HostTensor dk = test::f32({s.B, s.Nk, s.Hkv, s.D}), dv = test::f32({s.B, s.Nk, s.Hkv, s.D});
  AttnMask causal;
  causal.causal = true;
  try {
    attn_bwd_block_fp8(q, k, k, q, lse, lse, dq, dk, dv, causal);
    ADD_FAILURE() << "head dim 32 was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("D=32"), std::string::npos) << m;
    EXPECT_NE(m.find("fp8.attention: false"), std::string::npos) << m;
  }
  Tensor on_gpu = q;  // the CUDA path refuses head dim 32 from the shapes alone, before touching any data
  on_gpu.device = Device::cuda(0);
  try {
    attn_bwd_block_fresh_fp8(on_gpu, k, k, on_gpu, lse, lse, dq, dk, dv, causal);
    ADD_FAILURE() << "a CUDA call outside the kernel's scope was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("runs the sm_90a kernel"), std::string::npos) << m;
    EXPECT_NE(m.find("head dim 32"), std::string::npos) << m;
    EXPECT_NE(m.find("fp8.attention: false"), std::string::npos) << m;
  }
  EXPECT_TRUE(attn_fp8_head_dim_supported(64) && attn_fp8_head_dim_supported(128));
  EXPECT_FALSE(attn_fp8_head_dim_supported(96) || attn_fp8_head_dim_supported(256));
}

}  // namespace
}  // namespace rt
