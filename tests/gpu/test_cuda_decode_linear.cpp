// The decode step's fused one-row Linears (kernels/decode_linear.h, kernels/cuda/gemv.cu): the RMSNorm or SwiGLU
// inside the GEMV gives the bits of the two calls it replaces (rmsnorm_fwd / swiglu_fwd, then gemm, whose one-row
// case is the same GEMV), and matches an fp64 reference of the same bf16 inputs. The intermediate buffers of the
// unfused path are poisoned and must stay poisoned: that proves the fused kernel ran (a silent fallback would
// write them). Shapes: N not a multiple of the kernel's 4 rows, K of one and of two unrolled passes (K > 6144),
// K = 8 (one word), c bf16 and f32, beta 0 on a poisoned c and beta 1 / 0.5 on a live one.
#include <cstring>

#include "kernels/decode_linear.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

float bf16_of(double x) { return bf16_to_float(float_to_bf16(float(x))); }

bool all_nan(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isnan(x)) return false;
  return true;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(std::isnan(a[i])) << "NaN at " << i;
    ASSERT_EQ(0, std::memcmp(&a[i], &b[i], sizeof(float))) << "element " << i << ": fused " << a[i] << ", two calls "
                                                           << b[i];
  }
}

struct Case {
  int64_t N, K;
  DType c;
  float beta;
};

TEST(CudaDecodeLinear, NormInTheGemvGivesTheTwoCallsBitsAndMatchesFp64) {
  RT_REQUIRE_CUDA();
  const float eps = 1e-5f;
  for (const Case& cs : {Case{3072, 2048, DType::bf16, 0.f}, Case{37, 6400, DType::f32, 0.f},
                         Case{5, 8, DType::f32, 0.f}, Case{1001, 2048, DType::f32, 0.f}}) {
    SCOPED_TRACE("N " + std::to_string(cs.N) + " K " + std::to_string(cs.K) + " c " + dtype_name(cs.c));
    const uint64_t seed = 700 + uint64_t(cs.N + cs.K);
    const std::vector<float> x = bf16_rounded(random_vector(cs.K, seed, 1.5f, 0.2f));
    const std::vector<float> nw = bf16_rounded(random_vector(cs.K, seed + 1, 0.3f, 1.f));
    const std::vector<float> w = bf16_rounded(random_vector(cs.N * cs.K, seed + 2));
    Buffer dx(gpu(), DType::bf16, {1, cs.K}), dnw(gpu(), DType::bf16, {cs.K}), dw(gpu(), DType::bf16, {cs.N, cs.K});
    Buffer fused(gpu(), cs.c, {1, cs.N}), two(gpu(), cs.c, {1, cs.N});
    Buffer ln(gpu(), DType::bf16, {1, cs.K}), rstd(gpu(), DType::f32, {1});
    upload(dx, x), upload(dnw, nw), upload(dw, w);
    poison(fused), poison(two), poison(ln), poison(rstd);
    rmsnorm_linear_row(fused.t(), dx.t(), dnw.t(), eps, dw.t(), ln.t(), rstd.t());
    ASSERT_TRUE(all_nan(download(ln)) && all_nan(download(rstd))) << "the fused kernel did not run (ln was written)";
    rmsnorm_fwd(ln.t(), rstd.t(), dx.t(), dnw.t(), eps);
    gemm(two.t(), ln.t(), dw.t(), false, true);
    const std::vector<float> got = download(fused);
    expect_same_bits(got, download(two));
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double r = 1.0 / std::sqrt(ss / double(cs.K) + eps);
    std::vector<float> ref(size_t(cs.N));
    for (int64_t n = 0; n < cs.N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < cs.K; ++k)
        s += double(bf16_of(x[size_t(k)] * r * nw[size_t(k)])) * w[size_t(n * cs.K + k)];
      ref[size_t(n)] = float(s);
    }
    EXPECT_CLOSE(got, ref, cs.c == DType::f32 ? 3e-4 : 8e-3);
  }
}

TEST(CudaDecodeLinear, SwigluInTheGemvGivesTheTwoCallsBitsAndMatchesFp64) {
  RT_REQUIRE_CUDA();
  for (const Case& cs : {Case{2048, 5632, DType::bf16, 1.f}, Case{37, 6400, DType::f32, 0.f},
                         Case{9, 8, DType::bf16, 0.5f}}) {
    SCOPED_TRACE("N " + std::to_string(cs.N) + " K " + std::to_string(cs.K) + " c " + dtype_name(cs.c) + " beta " +
                 std::to_string(cs.beta));
    const uint64_t seed = 800 + uint64_t(cs.N + cs.K);
    std::vector<float> gu = random_vector(2 * cs.K, seed, 1.f);
    for (int64_t k = 0; k < cs.K; ++k) gu[size_t(k)] *= 2.f;  // the gate columns wider, as trained gates are
    gu = bf16_rounded(gu);
    const std::vector<float> w = bf16_rounded(random_vector(cs.N * cs.K, seed + 1));
    const std::vector<float> c0 = bf16_rounded(random_vector(cs.N, seed + 2));
    Buffer dgu(gpu(), DType::bf16, {1, 2 * cs.K}), dw(gpu(), DType::bf16, {cs.N, cs.K});
    Buffer fused(gpu(), cs.c, {1, cs.N}), two(gpu(), cs.c, {1, cs.N}), g(gpu(), DType::bf16, {1, cs.K});
    upload(dgu, gu), upload(dw, w), poison(g);
    if (cs.beta == 0.f) poison(fused), poison(two);
    else upload(fused, c0), upload(two, c0);
    swiglu_linear_row(fused.t(), dgu.t(), dw.t(), cs.beta, g.t());
    ASSERT_TRUE(all_nan(download(g))) << "the fused kernel did not run (g was written)";
    swiglu_fwd(g.t(), dgu.t());
    gemm(two.t(), g.t(), dw.t(), false, true, 1.f, cs.beta);
    const std::vector<float> got = download(fused);
    expect_same_bits(got, download(two));
    std::vector<float> ref(size_t(cs.N));
    for (int64_t n = 0; n < cs.N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < cs.K; ++k) {
        const double gate = gu[size_t(k)], up = gu[size_t(cs.K + k)];
        s += double(bf16_of(gate / (1.0 + std::exp(-gate)) * up)) * w[size_t(n * cs.K + k)];
      }
      ref[size_t(n)] = float(s + (cs.beta != 0.f ? double(cs.beta) * c0[size_t(n)] : 0.0));
    }
    EXPECT_CLOSE(got, ref, cs.c == DType::f32 ? 3e-4 : 8e-3);
  }
}

}  // namespace
}  // namespace rt::test
