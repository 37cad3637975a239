// fp8.attention's model-level ops on CUDA (kernels/attn_fp8.h "On CUDA tensors", kernels/attn_fp8_gpu.cpp): the
// block ops RingAttention calls, attn_bwd_block_fresh_fp8 and attn_bwd_block_fp8, on CUDA tensors with a caller-owned
// workspace (AttnFp8BwdWorkspaceScope) against the same ops on the CPU (f32: the recipe's reference) on the same
// inputs, causal and full, B 2, GQA and MHA:
//   - fresh random bf16-valued q, k, v, dO per case; lse and delta from the CPU forward (attn_fwd_whole,
//     attn_bwd_delta); the workspace filled with code 0xEE, dK and dV poisoned with NaN before the fresh call (it must
//     overwrite every row), dQ starting from fresh random values (it accumulates; the increment is compared);
//   - dQ, dK, dV within 1e-2 relative L2 of the CPU op (f32 reassociation and a few flipped E4M3 codes differ:
//     tests/gpu/test_cuda_attn_bwd_fp8.cpp measures the kernel itself at ~1e-3); a NaN anywhere fails;
//   - the accumulating form adds the same increment to fresh random dK, dV.
// And the refusals on CUDA, each before any write: row ranges, an off-diagonal causal block, documents, D 64, the
// two_kv form, no workspace, a workspace too small. Skipped only without a CUDA device ("no CUDA device"); a GPU other
// than an H100 / H200 fails with the kernel's refusal.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/attn_bwd_fp8.h"
#include "kernels/attn_fp8.h"
#include "tests/gpu/attn_bwd_device_inputs.h"
#include "tests/gpu/fp8_attn_test_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

using Case = Fp8AttnCase;
constexpr int64_t D = 128;

// lse and delta (B,H,N) of the CPU forward of q, k, v (f32) with dO.
void cpu_lse_delta(const Case& s, std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                   std::vector<float>& dout, std::vector<float>& lse, std::vector<float>& delta) {
  std::vector<float> out(q.size()), acc(q.size()), m(size_t(s.B * s.H * s.N)), l(m.size());
  lse.assign(m.size(), 0.f);
  delta.assign(m.size(), 0.f);
  AttnState st{host_view(acc, {s.B, s.H, s.N, D}), host_view(m, {s.B, s.H, s.N}), host_view(l, {s.B, s.H, s.N})};
  AttnMask mask;
  mask.causal = s.causal;
  attn_fwd_whole(host_view(q, {s.B, s.N, s.H, D}), host_view(k, {s.B, s.N, s.Hkv, D}),
                 host_view(v, {s.B, s.N, s.Hkv, D}), st, mask, host_view(out, {s.B, s.N, s.H, D}),
                 host_view(lse, {s.B, s.H, s.N}));
  attn_bwd_delta(host_view(out, {s.B, s.N, s.H, D}), host_view(dout, {s.B, s.N, s.H, D}),
                 host_view(delta, {s.B, s.H, s.N}));
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = float(double(a[i]) - double(b[i]));
  return d;
}

// One case's inputs on both devices.
struct OpCase {
  Case s;
  std::vector<float> q, k, v, dout, lse, delta;
  AttnBwdDeviceInputs dev;  // q / k / v / dout, lse / delta on the GPU
  Buffer bdq, bdk, bdv, work;
  OpCase(const Case& c, uint64_t seed)
      : s(c),
        dev(c.B, c.N, c.N, c.H, c.Hkv, D),
        bdq(gpu(), DType::f32, {c.B, c.N, c.H, D}),
        bdk(gpu(), DType::f32, {c.B, c.N, c.Hkv, D}),
        bdv(gpu(), DType::f32, {c.B, c.N, c.Hkv, D}),
        work(gpu(), DType::e4m3, {attn_fp8_bwd_workspace_bytes(c.B, c.N, c.H, c.Hkv, D)}) {
    Fp8AttnInputs in = random_fp8_attn_inputs(s, seed);
    q = in.q, k = in.k, v = in.v;
    dout = bf16_rounded(random_vector(s.B * s.N * s.H * D, seed + 3));
    cpu_lse_delta(s, q, k, v, dout, lse, delta);
    dev.fill(q, k, v, dout, lse, delta);
    poison_codes(work.t());
  }
  AttnMask mask() const {
    AttnMask m;
    m.causal = s.causal;
    return m;
  }
};

void run_op_case(const Case& s, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "B " << s.B << " N " << s.N << " H " << s.H << " Hkv " << s.Hkv
                                    << (s.causal ? " causal" : " full"));
  OpCase c(s, seed);
  const std::vector<float> dq0 = random_vector(s.B * s.N * s.H * D, seed + 4, 1e-3f);
  const std::vector<float> dk0 = random_vector(s.B * s.N * s.Hkv * D, seed + 5, 1e-3f);
  const std::vector<float> dv0 = random_vector(s.B * s.N * s.Hkv * D, seed + 6, 1e-3f);

  // The CPU op (f32) from zero accumulators.
  std::vector<float> dq_cpu(dq0.size(), 0.f), dk_cpu(dk0.size(), std::nanf("")), dv_cpu(dv0.size(), std::nanf(""));
  attn_bwd_block_fresh_fp8(host_view(c.q, {s.B, s.N, s.H, D}), host_view(c.k, {s.B, s.N, s.Hkv, D}),
                           host_view(c.v, {s.B, s.N, s.Hkv, D}), host_view(c.dout, {s.B, s.N, s.H, D}),
                           host_view(c.lse, {s.B, s.H, s.N}), host_view(c.delta, {s.B, s.H, s.N}),
                           host_view(dq_cpu, {s.B, s.N, s.H, D}), host_view(dk_cpu, {s.B, s.N, s.Hkv, D}),
                           host_view(dv_cpu, {s.B, s.N, s.Hkv, D}), c.mask());

  // The fresh form on CUDA: dK, dV poisoned, dQ from dq0. The mask's full ranges given explicitly this time.
  upload(c.bdq, dq0);
  poison(c.bdk);
  poison(c.bdv);
  AttnMask explicit_ranges = c.mask();
  explicit_ranges.q_end = s.N, explicit_ranges.k_end = s.N;
  {
    const AttnFp8BwdWorkspaceScope scope(&c.work.t());
    attn_bwd_block_fresh_fp8(c.dev.q, c.dev.k, c.dev.v, c.dev.dout, c.dev.lse, c.dev.delta, c.bdq, c.bdk, c.bdv,
                             explicit_ranges);
  }
  const std::vector<float> dq_gpu = minus(download(c.bdq), dq0), dk_gpu = download(c.bdk), dv_gpu = download(c.bdv);
  const double eq = rel_error(dq_gpu, dq_cpu), ek = rel_error(dk_gpu, dk_cpu), ev = rel_error(dv_gpu, dv_cpu);

  // The accumulating form: dK, dV from fresh random values; the increments compared.
  upload(c.bdq, dq0);
  upload(c.bdk, dk0);
  upload(c.bdv, dv0);
  poison_codes(c.work.t());
  {
    const AttnFp8BwdWorkspaceScope scope(&c.work.t());
    attn_bwd_block_fp8(c.dev.q, c.dev.k, c.dev.v, c.dev.dout, c.dev.lse, c.dev.delta, c.bdq, c.bdk, c.bdv, c.mask());
  }
  const double aq = rel_error(minus(download(c.bdq), dq0), dq_cpu);
  const double ak = rel_error(minus(download(c.bdk), dk0), dk_cpu), av = rel_error(minus(download(c.bdv), dv0), dv_cpu);
  std::printf("[ fp8 attention op ] B %ld N %ld H %ld Hkv %ld %s: fresh vs CPU op dq %.3e dk %.3e dv %.3e; "
              "accumulating dq %.3e dk %.3e dv %.3e\n",
              long(s.B), long(s.N), long(s.H), long(s.Hkv), s.causal ? "causal" : "full", eq, ek, ev, aq, ak, av);
  EXPECT_LE(eq, 1e-2) << "dQ (fresh) vs the CPU op: " << worst_mismatch(dq_gpu, dq_cpu);
  EXPECT_LE(ek, 1e-2) << "dK (fresh) vs the CPU op: " << worst_mismatch(dk_gpu, dk_cpu);
  EXPECT_LE(ev, 1e-2) << "dV (fresh) vs the CPU op: " << worst_mismatch(dv_gpu, dv_cpu);
  EXPECT_LE(aq, 1e-2) << "dQ (accumulating) vs the CPU op";
  EXPECT_LE(ak, 1e-2) << "dK (accumulating) vs the CPU op";
  EXPECT_LE(av, 1e-2) << "dV (accumulating) vs the CPU op";
}

TEST(CudaAttnFp8ModelOp, GqaBothMasksMatchTheCpuOp) {
  RT_REQUIRE_CUDA();
  for (bool causal : {true, false}) run_op_case({2, 256, 4, 2, causal}, causal ? 301 : 302);
}

TEST(CudaAttnFp8ModelOp, MhaAndWideGroupBothMasksMatchTheCpuOp) {
  RT_REQUIRE_CUDA();
  for (bool causal : {true, false}) run_op_case({2, 384, 2, 2, causal}, causal ? 311 : 312);
  for (bool causal : {true, false}) run_op_case({2, 512, 8, 1, causal}, causal ? 321 : 322);
}

// `call` throws an Error whose text holds every one of `needles`; dk (poisoned) is left untouched.
template <class Call>
void expect_refused(const char* what, Call call, const std::vector<std::string>& needles, const Tensor& dk) {
  SCOPED_TRACE(what);
  try {
    call();
    ADD_FAILURE() << what << " was accepted on CUDA";
  } catch (const Error& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
  for (float x : download(dk)) ASSERT_TRUE(std::isnan(x)) << what << ": a refused call wrote dK";
}

TEST(CudaAttnFp8ModelOp, RefusesWhatTheKernelDoesNotCover) {
  RT_REQUIRE_CUDA();
  const Case s{2, 256, 4, 2, true};
  OpCase c(s, 331);
  poison(c.bdq);
  poison(c.bdk);
  poison(c.bdv);
  const AttnFp8BwdWorkspaceScope scope(&c.work.t());
  auto fresh = [&](const AttnMask& m) {
    return [&c, m] {
      attn_bwd_block_fresh_fp8(c.dev.q, c.dev.k, c.dev.v, c.dev.dout, c.dev.lse, c.dev.delta, c.bdq, c.bdk, c.bdv, m);
    };
  };
  // Row ranges and off-diagonal offsets (the ring's blocks) are in the kernel's scope: tests/gpu/
  // test_cuda_attn_bwd_fp8_blocks.cpp and tests/mpi/test_gpu_fp8_grid.cpp GpuFp8AttentionRing run them.
  const int64_t fake_pos[1] = {0};
  AttnMask docs = c.mask();
  docs.docs.q_pos = docs.docs.q_doc_start = docs.docs.k_pos = fake_pos;  // never read: refused first
  expect_refused("documents", fresh(docs), {"documents", "without packed documents", "fp8.attention: false"},
                 c.bdk);
  expect_refused(
      "the two_kv form",
      [&] {
        attn_bwd_block_fresh_two_kv_fp8(c.dev.q, c.dev.k, c.dev.v, c.dev.k, c.dev.v, c.dev.dout, c.dev.lse,
                                        c.dev.delta, c.bdq, c.bdk, c.bdv, c.bdk, c.bdv, c.mask());
      },
      {"no CUDA path", "without packed documents"}, c.bdk);
  {
    Buffer q64(gpu(), DType::bf16, {2, 256, 4, 64}), k64(gpu(), DType::bf16, {2, 256, 2, 64});
    expect_refused(
        "head dim 64",
        [&] { attn_bwd_block_fp8(q64, k64, k64, q64, c.dev.lse, c.dev.delta, c.bdq, c.bdk, c.bdv, c.mask()); },
        {"head dim 64"}, c.bdk);
  }
  // The whole call under the workspace scope each block below sets.
  auto whole = [&] {
    attn_bwd_block_fp8(c.dev.q, c.dev.k, c.dev.v, c.dev.dout, c.dev.lse, c.dev.delta, c.bdq, c.bdk, c.bdv, c.mask());
  };
  {
    const AttnFp8BwdWorkspaceScope none(nullptr);
    expect_refused("no workspace", whole, {"AttnFp8BwdWorkspaceScope"}, c.bdk);
  }
  {
    const Tensor small = c.work.t().slice(0, 1024);
    const AttnFp8BwdWorkspaceScope too_small(&small);
    expect_refused("a workspace too small", whole, {"the workspace holds 1024 bytes"}, c.bdk);
  }
}

}  // namespace
}  // namespace rt::test
