// The fp64 reference of the decode ops (attn_decode, attn_decode_partial), shared by the CPU test
// (tests/unit/kernels/test_attn_decode_cpu.cpp) and the GPU test (tests/gpu/test_cuda_attn_decode.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace rt::test {

struct DecodeShape {
  int64_t B, H, Hkv, D, Nk;
  std::vector<int32_t> lens;  // (B) cache rows per sequence, each in [0, Nk]
};

struct DecodeReference {
  std::vector<double> out;  // (B,1,H,D); 0 where the length is 0
  std::vector<double> lse;  // (B,H,1) natural log; -inf where the length is 0
};

// q (B,1,H,D), k and v (B,Nk,Hkv,D) as float values (already rounded as the kernel sees them); two passes in fp64.
inline DecodeReference decode_reference(const DecodeShape& s, const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v) {
  DecodeReference r{std::vector<double>(size_t(s.B * s.H * s.D), 0.0), std::vector<double>(size_t(s.B * s.H), 0.0)};
  const int64_t G = s.H / s.Hkv;
  const double scale = 1.0 / std::sqrt(double(s.D));
  std::vector<double> p;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t len = s.lens[size_t(b)], hk = h / G, row = b * s.H + h;
      const float* qr = q.data() + row * s.D;  // (D)
      if (len == 0) {
        r.lse[size_t(row)] = -INFINITY;
        continue;
      }
      p.assign(size_t(len), 0.0);
      double mx = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        const float* kr = k.data() + ((b * s.Nk + j) * s.Hkv + hk) * s.D;  // (D)
        double dot = 0;
        for (int64_t e = 0; e < s.D; ++e) dot += double(qr[e]) * kr[e];
        p[size_t(j)] = dot * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      double sum = 0;
      for (auto& x : p) sum += (x = std::exp(x - mx));
      double* o = r.out.data() + row * s.D;  // (D)
      for (int64_t j = 0; j < len; ++j) {
        const float* vr = v.data() + ((b * s.Nk + j) * s.Hkv + hk) * s.D;  // (D)
        for (int64_t e = 0; e < s.D; ++e) o[e] += p[size_t(j)] * vr[e];
      }
      for (int64_t e = 0; e < s.D; ++e) o[e] /= sum;
      r.lse[size_t(row)] = mx + std::log(sum);
    }
  return r;
}

// ||out - ref|| / ||ref||; infinity on any NaN in out.
inline double decode_rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// max |lse - ref| where a -inf reference must be matched exactly; infinity on NaN or a mismatch of infinities.
inline double decode_lse_error(const std::vector<float>& lse, const std::vector<double>& ref) {
  if (lse.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isnan(lse[i])) return INFINITY;
    if (std::isinf(ref[i]) || std::isinf(lse[i])) {
      if (double(lse[i]) != ref[i]) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(lse[i] - ref[i]));
  }
  return worst;
}

}  // namespace rt::test
