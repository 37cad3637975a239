// Helpers for the CPU op tests: host tensors backed by std::vector, seeded random fills, NaN poisoning,
// relative-norm error against fp64 references, and a naive fp64 attention reference.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/ops.h"

namespace rt::test {

// A host tensor that owns its storage. Shapes given as vectors (Tensor's constructor takes a fixed list).
struct HostTensor {
  std::vector<uint32_t> storage;  // 4-byte words, enough for f32 / i32 (bf16 uses half)
  Tensor t;

  HostTensor() = default;
  HostTensor(DType dtype, const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    storage.assign(size_t(n > 0 ? n : 1), 0u);
    t.data = storage.data();
    t.dtype = dtype;
    t.device = Device::cpu();
    t.ndim = int(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) t.shape[i] = dims[i];
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&& o) noexcept : storage(std::move(o.storage)), t(o.t) { t.data = storage.data(); }
  HostTensor& operator=(HostTensor&& o) noexcept {
    storage = std::move(o.storage);
    t = o.t;
    t.data = storage.data();
    return *this;
  }

  int64_t numel() const { return t.numel(); }
  float* f() { return t.ptr<float>(); }
  const float* f() const { return t.ptr<float>(); }
  int32_t* i() { return t.ptr<int32_t>(); }
  float& operator[](int64_t k) { return f()[k]; }
  float operator[](int64_t k) const { return f()[k]; }
  std::vector<double> to_double() const {
    std::vector<double> out(static_cast<size_t>(numel()));
    for (int64_t k = 0; k < numel(); ++k) out[size_t(k)] = f()[k];
    return out;
  }
  operator Tensor() const { return t; }
};

inline HostTensor f32(const std::vector<int64_t>& dims) { return HostTensor(DType::f32, dims); }
inline HostTensor i32(const std::vector<int64_t>& dims) { return HostTensor(DType::i32, dims); }

// Uniform in [lo, hi) from a seeded generator (never all zeros).
inline HostTensor random_f32(const std::vector<int64_t>& dims, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  HostTensor h = f32(dims);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t k = 0; k < h.numel(); ++k) h[k] = dist(gen);
  return h;
}

inline void poison(HostTensor& h) {
  for (int64_t k = 0; k < h.numel(); ++k) h[k] = std::numeric_limits<float>::quiet_NaN();
}

inline bool any_nan(const float* p, int64_t n) {
  for (int64_t k = 0; k < n; ++k)
    if (std::isnan(p[k])) return true;
  return false;
}
inline bool any_nan(const HostTensor& h) { return any_nan(h.f(), h.numel()); }

// An attention LSE against its reference: -inf exactly where the reference has -inf (rows with no visible key),
// relative error elsewhere; anything else non-finite gives +inf.
inline double lse_err(const HostTensor& lse, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (int64_t k = 0; k < lse.numel(); ++k) {
    if (std::isinf(ref[size_t(k)])) {
      if (!(std::isinf(lse[k]) && lse[k] < 0)) return INFINITY;
      continue;
    }
    if (!std::isfinite(lse[k])) return INFINITY;
    num += (lse[k] - ref[size_t(k)]) * (lse[k] - ref[size_t(k)]);
    den += ref[size_t(k)] * ref[size_t(k)];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// ||out - ref|| / ||ref|| (absolute norm when ref is all zero); NaN in out gives +inf.
inline double rel_err(const float* out, const double* ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (std::isnan(out[k])) return std::numeric_limits<double>::infinity();
    const double e = double(out[k]) - ref[k];
    num += e * e;
    den += ref[k] * ref[k];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
inline double rel_err(const HostTensor& out, const std::vector<double>& ref) {
  return rel_err(out.f(), ref.data(), out.numel());
}

// ---- naive fp64 attention ------------------------------------------------------------------------
struct AttnShape {
  int64_t B, Nq, Nk, H, Hkv, D;
};

// Query row i of sample b sees key row j: the document rule when m.docs is set, else causal with offsets.
inline bool ref_visible(const AttnMask& m, int64_t b, int64_t i, int64_t j) {
  if (m.docs.on()) {
    const int64_t kp = m.docs.k_pos[b * m.docs.k_stride + j];
    return m.docs.q_doc_start[b * m.docs.q_stride + i] <= kp && kp <= m.docs.q_pos[b * m.docs.q_stride + i];
  }
  return !m.causal || m.k_offset + j <= m.q_offset + i;
}
inline int64_t ref_end(int64_t end, int64_t n) { return end < 0 ? n : end; }

// O (B,Nq,H,D) and lse (B,H,Nq) over the mask's pairs, for query rows in its range (others left as given).
inline void attention_forward_ref(const AttnShape& s, const float* q, const float* k, const float* v,
                                  const AttnMask& mask, std::vector<double>& out, std::vector<double>& lse) {
  const int64_t g = s.H / s.Hkv;
  const double scale = 1.0 / std::sqrt(double(s.D));
  out.assign(size_t(s.B * s.Nq * s.H * s.D), 0.0);
  lse.assign(size_t(s.B * s.H * s.Nq), -INFINITY);
  std::vector<double> sc(size_t(s.Nk));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = mask.q_begin; i < ref_end(mask.q_end, s.Nq); ++i) {
        double mx = -INFINITY;
        for (int64_t j = mask.k_begin; j < ref_end(mask.k_end, s.Nk); ++j) {
          if (!ref_visible(mask, b, i, j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < s.D; ++d)
            dot += double(q[((b * s.Nq + i) * s.H + h) * s.D + d]) *
                   double(k[((b * s.Nk + j) * s.Hkv + h / g) * s.D + d]);
          sc[size_t(j)] = dot * scale;
          mx = std::max(mx, sc[size_t(j)]);
        }
        double* o = &out[size_t(((b * s.Nq + i) * s.H + h) * s.D)];
        for (int64_t d = 0; d < s.D; ++d) o[d] = 0;
        double& l = lse[size_t((b * s.H + h) * s.Nq + i)];
        if (mx == -INFINITY) {
          l = -INFINITY;
          continue;
        }
        double sum = 0;
        for (int64_t j = mask.k_begin; j < ref_end(mask.k_end, s.Nk); ++j) {
          if (!ref_visible(mask, b, i, j)) continue;
          const double p = std::exp(sc[size_t(j)] - mx);
          sum += p;
          for (int64_t d = 0; d < s.D; ++d) o[d] += p * double(v[((b * s.Nk + j) * s.Hkv + h / g) * s.D + d]);
        }
        for (int64_t d = 0; d < s.D; ++d) o[d] /= sum;
        l = mx + std::log(sum);
      }
}

// Gradient contributions of the mask's pairs, given the full-row lse and delta (B,H,Nq):
// P = exp(S - lse), dS = P (dO.V - delta), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
// dq (B,Nq,H,D), dk and dv (B,Nk,Hkv,D) are overwritten.
inline void attention_backward_ref(const AttnShape& s, const float* q, const float* k, const float* v,
                                   const float* dout, const double* lse, const double* delta, const AttnMask& mask,
                                   std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv) {
  const int64_t g = s.H / s.Hkv;
  const double scale = 1.0 / std::sqrt(double(s.D));
  dq.assign(size_t(s.B * s.Nq * s.H * s.D), 0.0);
  dk.assign(size_t(s.B * s.Nk * s.Hkv * s.D), 0.0);
  dv.assign(size_t(s.B * s.Nk * s.Hkv * s.D), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = mask.q_begin; i < ref_end(mask.q_end, s.Nq); ++i) {
        const double L = lse[(b * s.H + h) * s.Nq + i];
        if (L == -INFINITY) continue;
        const int64_t qo = ((b * s.Nq + i) * s.H + h) * s.D;
        for (int64_t j = mask.k_begin; j < ref_end(mask.k_end, s.Nk); ++j) {
          if (!ref_visible(mask, b, i, j)) continue;
          const int64_t ko = ((b * s.Nk + j) * s.Hkv + h / g) * s.D;
          double dot = 0, dp = 0;
          for (int64_t d = 0; d < s.D; ++d) {
            dot += double(q[qo + d]) * double(k[ko + d]);
            dp += double(dout[qo + d]) * double(v[ko + d]);
          }
          const double p = std::exp(dot * scale - L);
          const double ds = p * (dp - delta[(b * s.H + h) * s.Nq + i]);
          for (int64_t d = 0; d < s.D; ++d) {
            dq[size_t(qo + d)] += scale * ds * double(k[ko + d]);
            dk[size_t(ko + d)] += scale * ds * double(q[qo + d]);
            dv[size_t(ko + d)] += p * double(dout[qo + d]);
          }
        }
      }
}

// ---- fp64 finite differences -----------------------------------------------------------------------
// Gradient of L(x) = sum_k dout[k] * f(x)[k] by central differences in fp64. f maps a vector to a vector.
template <class F>
std::vector<double> fd_grad(F f, std::vector<double> x, const std::vector<double>& dout, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    const double x0 = x[k];
    x[k] = x0 + h;
    const std::vector<double> up = f(x);
    x[k] = x0 - h;
    const std::vector<double> dn = f(x);
    x[k] = x0;
    double s = 0;
    for (size_t e = 0; e < up.size(); ++e) s += dout[e] * (up[e] - dn[e]);
    g[k] = s / (2 * h);
  }
  return g;
}

// Elementwise difference out - start, in fp64, for ops that accumulate into out.
inline std::vector<double> minus(const HostTensor& out, const std::vector<double>& start) {
  std::vector<double> d(start.size());
  for (size_t k = 0; k < start.size(); ++k) d[k] = double(out[int64_t(k)]) - start[k];
  return d;
}
inline double rel_err(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t k = 0; k < ref.size(); ++k) {
    if (std::isnan(out[k])) return std::numeric_limits<double>::infinity();
    num += (out[k] - ref[k]) * (out[k] - ref[k]);
    den += ref[k] * ref[k];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace rt::test
