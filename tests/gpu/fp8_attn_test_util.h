// Shared by the FP8 attention experiment's GPU tests (test_cuda_attn_fwd_fp8.cpp, test_cuda_attn_bwd_fp8.cpp): the
// case shape, fresh bf16-valued inputs, E4M3 code transfer and poisoning, bit-exact mismatch counters, the host's
// per-(128-row block, head) quantization by kernels/fp8.h's rule that both quantizers are checked against, and the
// softmax row of their fp64 attention references.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/fp8.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {

// One test shape: B samples of N tokens (a multiple of 128), H query heads and Hkv K/V heads (Hkv divides H), D 128.
struct Fp8AttnCase {
  int64_t B, N, H, Hkv;
  bool causal;
};

// Fresh normal(0, 1) q (B,N,H,D), k and v (B,N,Hkv,D), rounded to bf16, from seeds seed, seed + 1, seed + 2.
struct Fp8AttnInputs {
  std::vector<float> q, k, v;
};
inline Fp8AttnInputs random_fp8_attn_inputs(const Fp8AttnCase& s, uint64_t seed) {
  const int64_t D = 128;
  return Fp8AttnInputs{bf16_rounded(random_vector(s.B * s.N * s.H * D, seed)),
                       bf16_rounded(random_vector(s.B * s.N * s.Hkv * D, seed + 1)),
                       bf16_rounded(random_vector(s.B * s.N * s.Hkv * D, seed + 2))};
}

// The E4M3 codes of a device tensor, on the host.
inline std::vector<uint8_t> download_codes(const Tensor& t) {
  std::vector<uint8_t> c(size_t(t.numel()));
  copy_cast(Tensor(c.data(), DType::e4m3, Device::cpu(), {t.numel()}), t);
  return c;
}
// Fills an E4M3 device tensor with code 0xEE, so that a code the quantizer leaves unwritten fails the comparison.
inline void poison_codes(const Tensor& t) {
  std::vector<uint8_t> c(size_t(t.numel()), 0xEE);
  copy_cast(t, Tensor(c.data(), DType::e4m3, Device::cpu(), {t.numel()}));
}

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
// How many codes differ (-1 when the lengths do).
inline int64_t count_code_mismatches(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  return bad;
}
// How many floats differ in their bits (-1 when the lengths do).
inline int64_t count_factor_mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += float_bits(got[i]) != float_bits(want[i]);
  return bad;
}

// Host quantization of x (B,N,heads,D) per (128-row block, head) by kernels/fp8.h's rule: codes (as many as x) with
// the code of row r (0..127) of block blk, column d at code_at(b, h, blk, r, d), and factors (B,heads,N/128).
template <class CodeAt>
void host_quantize_row_blocks(const std::vector<float>& x, int64_t B, int64_t N, int64_t heads, CodeAt code_at,
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
        for (int64_t r = 0; r < 128; ++r)
          for (int64_t d = 0; d < D; ++d) codes[code_at(b, h, blk, r, d)] = float_to_e4m3(x[at(r, d)] * s);
        factors[size_t((b * heads + h) * nblk + blk)] = fp8_factor_from_scale(s);
      }
}

// The fp64 reference's softmax of one query row qr (D values): p[j] = exp(scale * qr . k_row(j) - mx) for the keys
// j < keys (k_row(j): that key's D values), mx their largest scaled score; returns l, the sum of the p[j].
template <class KeyRow>
double fp64_softmax_row(const float* qr, KeyRow k_row, int64_t keys, int64_t D, double scale, std::vector<double>& p,
                        double& mx) {
  mx = -INFINITY;
  for (int64_t j = 0; j < keys; ++j) {
    const float* kr = k_row(j);
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += double(qr[d]) * double(kr[d]);
    p[size_t(j)] = dot * scale;
    mx = std::max(mx, p[size_t(j)]);
  }
  double l = 0;
  for (int64_t j = 0; j < keys; ++j) l += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
  return l;
}

}  // namespace rt::test
