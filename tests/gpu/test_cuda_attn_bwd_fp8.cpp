// The FP8 attention backward experiment (kernels/attn_bwd_fp8.h, issue 47) on CUDA:
//   (a) the quantizer's transposed codes and factors bit for bit against kernels/fp8.h's rule on the host (Q^T, dO^T
//       per 128-row block and head with their queries permuted per 16, K^T per 128-key block and K/V head).
// Fresh random inputs per case, every output poisoned first. Skipped only without a CUDA device; a GPU other than an
// H100 / H200 fails with the op's refusal.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/attn_bwd_fp8.h"
#include "kernels/attn_fwd_fp8.h"
#include "kernels/fp8.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

struct Case {
  int64_t B, N, H, Hkv;
  bool causal;
};

std::vector<uint8_t> download_codes(const Tensor& t) {
  std::vector<uint8_t> c(size_t(t.numel()));
  copy_cast(Tensor(c.data(), DType::e4m3, Device::cpu(), {t.numel()}), t);
  return c;
}
void poison_codes(const Tensor& t) {
  std::vector<uint8_t> c(size_t(t.numel()), 0xEE);
  copy_cast(t, Tensor(c.data(), DType::e4m3, Device::cpu(), {t.numel()}));
}
uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
int64_t count_code_mismatches(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  return bad;
}
int64_t count_factor_mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += bits(got[i]) != bits(want[i]);
  return bad;
}

// The device codes of one case and their buffers.
struct Codes {
  std::unique_ptr<Buffer> qt, qf, dot, dof, kt, kf;
  AttnFp8BwdCodes c;
  explicit Codes(const Case& s) {
    const int64_t D = 128, nblk = s.N / 128;
    qt = std::make_unique<Buffer>(gpu(), DType::e4m3, std::initializer_list<int64_t>{s.B, s.H, D, s.N});
    qf = std::make_unique<Buffer>(gpu(), DType::f32, std::initializer_list<int64_t>{s.B, s.H, nblk});
    dot = std::make_unique<Buffer>(gpu(), DType::e4m3, std::initializer_list<int64_t>{s.B, s.H, D, s.N});
    dof = std::make_unique<Buffer>(gpu(), DType::f32, std::initializer_list<int64_t>{s.B, s.H, nblk});
    kt = std::make_unique<Buffer>(gpu(), DType::e4m3, std::initializer_list<int64_t>{s.B, s.Hkv, D, s.N});
    kf = std::make_unique<Buffer>(gpu(), DType::f32, std::initializer_list<int64_t>{s.B, s.Hkv, nblk});
    c = AttnFp8BwdCodes{qt->t(), qf->t(), dot->t(), dof->t(), kt->t(), kf->t()};
    for (const Tensor* t : {&c.qt, &c.dot, &c.kt}) poison_codes(*t);
    for (const Tensor* t : {&c.q_factor, &c.do_factor, &c.k_factor}) poison(*t);
  }
};

// Host quantization of x (B,N,heads,D) per (128-row block, head): transposed codes (B,heads,D,N), row n of a block in
// column attn_fp8_vt_column_of_key(n) when `permute` (else column n), and factors (B,heads,N/128).
void host_transposed(const std::vector<float>& x, int64_t B, int64_t N, int64_t heads, bool permute,
                     std::vector<uint8_t>& codes, std::vector<float>& factors) {
  const int64_t D = 128, nblk = N / 128;
  codes.assign(x.size(), 0);
  factors.assign(size_t(B * heads * nblk), 0.f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t blk = 0; blk < nblk; ++blk) {
        auto at = [&](int64_t r, int64_t d) { return size_t(((b * N + blk * 128 + r) * heads + h) * D + d); };
        float amax = 0.f;
        for (int64_t r = 0; r < 128; ++r)
          for (int64_t d = 0; d < D; ++d) amax = fp8_amax_join(amax, x[at(r, d)]);
        const float s = fp8_scale_from_amax(amax);
        for (int64_t r = 0; r < 128; ++r) {
          const int64_t col = blk * 128 + (permute ? attn_fp8_vt_column_of_key(r) : r);
          for (int64_t d = 0; d < D; ++d) codes[size_t(((b * heads + h) * D + d) * N + col)] = float_to_e4m3(x[at(r, d)] * s);
        }
        factors[size_t((b * heads + h) * nblk + blk)] = fp8_factor_from_scale(s);
      }
}

// The host's codes of one case.
struct HostCodes {
  std::vector<uint8_t> qt, dot, kt;
  std::vector<float> qf, dof, kf;
};

// (a): quantizes on the device and compares with the host bit for bit.
void check_quantizer(const Case& s, const Tensor& dq_in, const Tensor& dk_in, const Tensor& ddo_in, const Codes& codes,
                     const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& dout,
                     HostCodes& host) {
  attn_bwd_fp8_quantize(dq_in, dk_in, ddo_in, codes.c);
  host_transposed(q, s.B, s.N, s.H, true, host.qt, host.qf);
  host_transposed(dout, s.B, s.N, s.H, true, host.dot, host.dof);
  host_transposed(k, s.B, s.N, s.Hkv, false, host.kt, host.kf);
  EXPECT_EQ(count_code_mismatches(download_codes(codes.c.qt), host.qt), 0) << "Q^T codes";
  EXPECT_EQ(count_code_mismatches(download_codes(codes.c.dot), host.dot), 0) << "dO^T codes";
  EXPECT_EQ(count_code_mismatches(download_codes(codes.c.kt), host.kt), 0) << "K^T codes";
  EXPECT_EQ(count_factor_mismatches(download(codes.c.q_factor), host.qf), 0) << "Q factors";
  EXPECT_EQ(count_factor_mismatches(download(codes.c.do_factor), host.dof), 0) << "dO factors";
  EXPECT_EQ(count_factor_mismatches(download(codes.c.k_factor), host.kf), 0) << "K factors";
}

void run_quantizer_case(const Case& s, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "B " << s.B << " N " << s.N << " H " << s.H << " Hkv " << s.Hkv);
  const int64_t D = 128;
  const std::vector<float> q = bf16_rounded(random_vector(s.B * s.N * s.H * D, seed));
  const std::vector<float> k = bf16_rounded(random_vector(s.B * s.N * s.Hkv * D, seed + 1));
  // dO at a gradient's magnitude, with one large row so the blocks' scales differ.
  std::vector<float> dout = random_vector(s.B * s.N * s.H * D, seed + 3, 1e-3f);
  for (int64_t d = 0; d < D; ++d) dout[size_t(d)] *= 50.f;
  dout = bf16_rounded(dout);
  Buffer bq(gpu(), DType::bf16, {s.B, s.N, s.H, D}), bk(gpu(), DType::bf16, {s.B, s.N, s.Hkv, D}),
      bdo(gpu(), DType::bf16, {s.B, s.N, s.H, D});
  upload(bq, q);
  upload(bk, k);
  upload(bdo, dout);
  Codes codes(s);
  HostCodes host;
  check_quantizer(s, bq, bk, bdo, codes, q, k, dout, host);
}

TEST(CudaAttnBwdFp8, QuantizerMatchesTheHostRule) {
  RT_REQUIRE_CUDA();
  run_quantizer_case({2, 256, 4, 2, true}, 101);
  run_quantizer_case({1, 384, 2, 2, true}, 111);
}

TEST(CudaAttnBwdFp8, RefusesCpuTensorsAndRaggedLengths) {
  std::vector<float> host(size_t(1 * 128 * 2 * 128));
  Tensor t(host.data(), DType::f32, Device::cpu(), {1, 128, 2, 128});
  AttnFp8BwdCodes none;
  EXPECT_THROW(attn_bwd_fp8_quantize(t, t, t, none), Error);
  RT_REQUIRE_CUDA();
  Buffer q(gpu(), DType::bf16, {1, 200, 2, 128});
  EXPECT_THROW(attn_bwd_fp8_quantize(q, q, q, none), Error);
  Buffer q64(gpu(), DType::bf16, {1, 256, 2, 64});
  EXPECT_THROW(attn_bwd_fp8_quantize(q64, q64, q64, none), Error);
}

}  // namespace
}  // namespace rt::test
