// FP8 attention backward v4 (kernels/cuda/attention/attn_bwd_fp8_sm90_v4.cu) against v3 on shapes with more units
// than SMs (the persistent CTAs, the unit ring and counter, the phases across units), where a CPU reference would be
// too slow: the same inputs and codes, each kernel from the same random accumulators (the op adds):
//   * dK, dV: v4 runs v3's products in v3's order and adds each row once, so they should be bit-equal; required within
//     1e-6 relative RMS of v3's increments, the count of differing floats printed;
//   * dQ: the tensor reduces' order among CTAs differs: within 1e-5 relative RMS (f32 reassociation);
//   * a second v4 call from the same accumulators: dK, dV bit-equal to the first (the unit counter reset itself).
// v3 itself is checked against the CPU op (test_cuda_attn_bwd_fp8*.cpp, which also run v4 on the small cases). lse and
// delta come from our bf16 forward (attn_fwd_whole, attn_bwd_delta) on fresh random bf16 inputs; any NaN fails.
// Skipped only without a CUDA device.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attn_bwd_fp8.h"
#include "kernels/attention.h"
#include "kernels/ops.h"
#include "tests/gpu/attn_bwd_device_inputs.h"
#include "tests/gpu/fp8_attn_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

constexpr int64_t kD = 128;

struct V4Case {
  const char* name;
  int64_t B, Nq, Nk, H, Hkv;
  AttnMask mask;
};

// The dQ, dK, dV accumulators after one call of `kernel` from (dq0, dk0, dv0).
struct Grads {
  std::vector<float> dq, dk, dv;
};
Grads run_kernel(const char* kernel, const V4Case& c, const AttnBwdDeviceInputs& in, const AttnFp8BwdCodes& codes,
                 const std::vector<float>& dq0, const std::vector<float>& dk0, const std::vector<float>& dv0) {
  const Fp8BwdKernelScope scope(Fp8BwdKernel{kernel, kernel, 0});
  Buffer bdq(gpu(), DType::f32, {c.B, c.Nq, c.H, kD}), bdk(gpu(), DType::f32, {c.B, c.Nk, c.Hkv, kD}),
      bdv(gpu(), DType::f32, {c.B, c.Nk, c.Hkv, kD});
  upload(bdq, dq0);
  upload(bdk, dk0);
  upload(bdv, dv0);
  attn_bwd_fp8_from_codes(in.q, in.k, in.v, in.dout, in.lse, in.delta, codes, c.mask, bdq, bdk, bdv);
  return Grads{download(bdq), download(bdk), download(bdv)};
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

void run_v4_vs_v3(const V4Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << c.name << ": B " << c.B << " Nq " << c.Nq << " Nk " << c.Nk << " H " << c.H
                                    << " Hkv " << c.Hkv << (c.mask.causal ? " causal" : " full"));
  const std::vector<float> q = bf16_rounded(random_vector(c.B * c.Nq * c.H * kD, seed));
  const std::vector<float> k = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * kD, seed + 1));
  const std::vector<float> v = bf16_rounded(random_vector(c.B * c.Nk * c.Hkv * kD, seed + 2));
  const std::vector<float> dout = bf16_rounded(random_vector(c.B * c.Nq * c.H * kD, seed + 3));
  const std::vector<float> dq0 = random_vector(c.B * c.Nq * c.H * kD, seed + 4, 1e-3f);
  const std::vector<float> dk0 = random_vector(c.B * c.Nk * c.Hkv * kD, seed + 5, 1e-3f);
  const std::vector<float> dv0 = random_vector(c.B * c.Nk * c.Hkv * kD, seed + 6, 1e-3f);

  // lse, delta (B,H,Nq) from the bf16 forward on the device.
  const AttnBwdDeviceInputs in(c.B, c.Nq, c.Nk, c.H, c.Hkv, kD);
  in.fill(q, k, v, dout, std::vector<float>(size_t(c.B * c.H * c.Nq), 0.f),
          std::vector<float>(size_t(c.B * c.H * c.Nq), 0.f));
  Buffer out(gpu(), DType::bf16, {c.B, c.Nq, c.H, kD}), acc(gpu(), DType::f32, {c.B, c.H, c.Nq, kD}),
      m(gpu(), DType::f32, {c.B, c.H, c.Nq}), l(gpu(), DType::f32, {c.B, c.H, c.Nq});
  AttnState scratch{acc.t(), m.t(), l.t()};
  poison(in.lse);
  poison(in.delta);
  attn_fwd_whole(in.q, in.k, in.v, scratch, c.mask, out, in.lse);
  attn_bwd_delta(out, in.dout, in.delta);

  // The codes, poisoned before the quantizer.
  const int64_t qblk = c.Nq / 128, kblk = c.Nk / 128;
  Buffer qt(gpu(), DType::e4m3, {c.B, c.H, kD, c.Nq}), qf(gpu(), DType::f32, {c.B, c.H, qblk}),
      dot(gpu(), DType::e4m3, {c.B, c.H, kD, c.Nq}), dof(gpu(), DType::f32, {c.B, c.H, qblk}),
      kt(gpu(), DType::e4m3, {c.B, c.Hkv, kD, c.Nk}), kf(gpu(), DType::f32, {c.B, c.Hkv, kblk});
  const AttnFp8BwdCodes codes{qt.t(), qf.t(), dot.t(), dof.t(), kt.t(), kf.t()};
  for (const Tensor* t : {&codes.qt, &codes.dot, &codes.kt}) poison_codes(*t);
  for (const Tensor* t : {&codes.q_factor, &codes.do_factor, &codes.k_factor}) poison(*t);
  attn_bwd_fp8_quantize(in.q, in.k, in.dout, codes);

  const Grads g3 = run_kernel("v3", c, in, codes, dq0, dk0, dv0);
  const Grads g4 = run_kernel("v4", c, in, codes, dq0, dk0, dv0);
  const Grads g4b = run_kernel("v4", c, in, codes, dq0, dk0, dv0);
  const std::vector<float> iq3 = minus(g3.dq, dq0), ik3 = minus(g3.dk, dk0), iv3 = minus(g3.dv, dv0);
  const std::vector<float> iq4 = minus(g4.dq, dq0), ik4 = minus(g4.dk, dk0), iv4 = minus(g4.dv, dv0);
  const double eq = rel_error(iq4, iq3), ek = rel_error(ik4, ik3), ev = rel_error(iv4, iv3);
  const int64_t bk = count_factor_mismatches(g4.dk, g3.dk), bv = count_factor_mismatches(g4.dv, g3.dv);
  std::printf("[ fp8 bwd v4 vs v3 ] %s: dq %.3e dk %.3e dv %.3e (floats differing: dk %ld, dv %ld of %zu)\n", c.name,
              eq, ek, ev, long(bk), long(bv), g3.dk.size());
  EXPECT_LE(eq, 1e-5) << "dQ v4 vs v3: " << worst_mismatch(iq4, iq3);
  EXPECT_LE(ek, 1e-6) << "dK v4 vs v3: " << worst_mismatch(ik4, ik3);
  EXPECT_LE(ev, 1e-6) << "dV v4 vs v3: " << worst_mismatch(iv4, iv3);
  EXPECT_GT(rel_error(iq3, std::vector<float>(iq3.size(), 0.f)), 0.5) << "v3's dQ increment is empty";
  EXPECT_EQ(count_factor_mismatches(g4b.dk, g4.dk), 0) << "v4 run twice: dK differs";
  EXPECT_EQ(count_factor_mismatches(g4b.dv, g4.dv), 0) << "v4 run twice: dV differs";
  EXPECT_LE(rel_error(minus(g4b.dq, dq0), iq4), 1e-5) << "v4 run twice: dQ differs";
}

TEST(CudaAttnBwdFp8V4, MatchesV3WithMoreUnitsThanSms) {
  RT_REQUIRE_CUDA();
  for (bool causal : {true, false}) {
    AttnMask mask;
    mask.causal = causal;
    // 16 key tiles x 4 K/V heads x 3 samples = 192 units (GQA, group 2).
    run_v4_vs_v3({causal ? "causal GQA, 192 units" : "full GQA, 192 units", 3, 2048, 2048, 8, 4, mask},
                 causal ? 401 : 402);
  }
  AttnMask mha;
  mha.causal = true;
  // 32 key tiles x 8 heads = 256 units, MHA: a longer causal tail.
  run_v4_vs_v3({"causal MHA, 256 units", 1, 4096, 4096, 8, 8, mha}, 403);
}

TEST(CudaAttnBwdFp8V4, MatchesV3OnRingBlocks) {
  RT_REQUIRE_CUDA();
  AttnMask past;  // cp 2, rank 1 receiving rank 0's keys: every pair visible, causal offsets
  past.causal = true;
  past.q_offset = 2048;
  run_v4_vs_v3({"past block, q_offset 2048", 2, 2048, 2048, 8, 2, past}, 411);
  AttnMask unequal;  // 1024 queries at the end of 3072 keys (group 4)
  unequal.causal = true;
  unequal.q_offset = 2048;
  run_v4_vs_v3({"Nq 1024 < Nk 3072, causal q_offset 2048", 2, 1024, 3072, 8, 2, unequal}, 412);
}

}  // namespace
}  // namespace rt::test
