// The document-mask attention cases of the GPU tests (tests/gpu/test_cuda_attention_docs.cpp,
// test_cuda_attention_doc_plans.cpp): a case (samples' document lengths, the rows' tokens, the calls' ranges), its
// 64-bit position arrays, random bf16-rounded inputs, and the fp64 host reference over the union of the calls'
// visible pairs (out, lse, and the gradients of sum(dout * out)).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/check.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {

struct Range {
  int64_t qb, qe, kb, ke;
};

struct DocCase {
  const char* name;
  int64_t B, H, Hkv;
  std::vector<std::vector<int64_t>> doc_lengths;  // per sample, summing to the sample's token count
  std::vector<int64_t> q_tokens, k_tokens;        // token index of each query row (Nq) and key row (Nk)
  std::vector<Range> blocks;                      // the calls, in order
};

inline constexpr int64_t kBase = (int64_t(1) << 33) + 5;  // positions are global and 64-bit

inline std::vector<int64_t> iota_rows(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  for (int64_t i = begin; i < end; ++i) r.push_back(i);
  return r;
}

// The mask arrays of a case: q_pos, q_doc (B,Nq) and k_pos (B,Nk).
struct DocArrays {
  std::vector<int64_t> q_pos, q_doc, k_pos;
};
inline DocArrays doc_arrays(const DocCase& c) {
  DocArrays a;
  for (int64_t b = 0; b < c.B; ++b) {
    std::vector<int64_t> start;  // document start of each token of sample b
    int64_t s = 0;
    for (int64_t len : c.doc_lengths[size_t(b)]) {
      for (int64_t i = 0; i < len; ++i) start.push_back(s);
      s += len;
    }
    for (int64_t t : c.q_tokens) {
      a.q_pos.push_back(kBase + t);
      a.q_doc.push_back(kBase + start.at(size_t(t)));
    }
    for (int64_t t : c.k_tokens) a.k_pos.push_back(kBase + t);
  }
  return a;
}

struct Results {
  std::vector<float> out, lse;             // (B,Nq,H,D), (B,H,Nq)
  std::vector<double> dq, dk, dv;          // increments over the pre-filled values
};

// fp64: out / lse over the union of the blocks' visible pairs, then the gradients of sum(dout * out).
inline Results reference(const DocCase& c, const DocArrays& a, int64_t D, const std::vector<float>& q,
                  const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& dout) {
  const int64_t Nq = int64_t(c.q_tokens.size()), Nk = int64_t(c.k_tokens.size()), H = c.H, g = c.H / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  Results r;
  r.out.assign(size_t(c.B * Nq * H * D), 0.f);
  r.lse.assign(size_t(c.B * H * Nq), -INFINITY);
  r.dq.assign(size_t(c.B * Nq * H * D), 0.0);
  r.dk.assign(size_t(c.B * Nk * c.Hkv * D), 0.0);
  r.dv.assign(size_t(c.B * Nk * c.Hkv * D), 0.0);
  std::vector<double> s(static_cast<size_t>(Nk)), o(static_cast<size_t>(D));  // scores of one row, its output
  std::vector<char> vis(static_cast<size_t>(Nk));                              // its visible keys
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Nq; ++i) {
        const int64_t qo = ((b * Nq + i) * H + h) * D;
        double mx = -INFINITY;
        for (int64_t j = 0; j < Nk; ++j) {
          bool in = false;
          for (const Range& bl : c.blocks) in = in || (bl.qb <= i && i < bl.qe && bl.kb <= j && j < bl.ke);
          const int64_t kp = a.k_pos[size_t(b * Nk + j)];
          vis[size_t(j)] = in && a.q_doc[size_t(b * Nq + i)] <= kp && kp <= a.q_pos[size_t(b * Nq + i)];
          if (!vis[size_t(j)]) continue;
          const int64_t ko = ((b * Nk + j) * c.Hkv + h / g) * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[size_t(qo + d)]) * double(k[size_t(ko + d)]);
          s[size_t(j)] = dot * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        if (mx == -INFINITY) continue;  // no visible key: out 0, lse -inf, no gradient
        double sum = 0;
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < Nk; ++j) {
          if (!vis[size_t(j)]) continue;
          const double p = std::exp(s[size_t(j)] - mx);
          sum += p;
          const int64_t ko = ((b * Nk + j) * c.Hkv + h / g) * D;
          for (int64_t d = 0; d < D; ++d) o[size_t(d)] += p * double(v[size_t(ko + d)]);
        }
        const double lse = mx + std::log(sum);
        double delta = 0;
        for (int64_t d = 0; d < D; ++d) {
          o[size_t(d)] /= sum;
          r.out[size_t(qo + d)] = float(o[size_t(d)]);
          delta += o[size_t(d)] * double(dout[size_t(qo + d)]);
        }
        r.lse[size_t((b * H + h) * Nq + i)] = float(lse);
        for (int64_t j = 0; j < Nk; ++j) {
          if (!vis[size_t(j)]) continue;
          const int64_t ko = ((b * Nk + j) * c.Hkv + h / g) * D;
          double dp = 0;
          for (int64_t d = 0; d < D; ++d) dp += double(dout[size_t(qo + d)]) * double(v[size_t(ko + d)]);
          const double p = std::exp(s[size_t(j)] - lse), ds = p * (dp - delta);
          for (int64_t d = 0; d < D; ++d) {
            r.dq[size_t(qo + d)] += scale * ds * double(k[size_t(ko + d)]);
            r.dk[size_t(ko + d)] += scale * ds * double(q[size_t(qo + d)]);
            r.dv[size_t(ko + d)] += p * double(dout[size_t(qo + d)]);
          }
        }
      }
  return r;
}

// A device copy of int64 positions (B, N).
struct DevicePositions {
  explicit DevicePositions(const std::vector<int64_t>& v) {
    CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(int64_t)));
    CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  }
  ~DevicePositions() {  // a destructor does not throw: a failed free is reported and fails the test
    const cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) ADD_FAILURE() << "cudaFree of document positions: " << cudaGetErrorString(e);
  }
  DevicePositions(const DevicePositions&) = delete;
  DevicePositions& operator=(const DevicePositions&) = delete;
  int64_t* p = nullptr;
};

struct Inputs {
  std::vector<float> q, k, v, dout, dq0, dk0, dv0;
};

inline Inputs make_inputs(const DocCase& c, int64_t D, uint64_t seed) {
  const int64_t nq = c.B * int64_t(c.q_tokens.size()) * c.H * D, nk = c.B * int64_t(c.k_tokens.size()) * c.Hkv * D;
  return Inputs{bf16_rounded(random_vector(nq, seed, 1.2f)),     bf16_rounded(random_vector(nk, seed + 1, 1.2f)),
                bf16_rounded(random_vector(nk, seed + 2)),       bf16_rounded(random_vector(nq, seed + 3)),
                random_vector(nq, seed + 4, 0.1f),               random_vector(nk, seed + 5, 0.1f),
                random_vector(nk, seed + 6, 0.1f)};
}

inline std::vector<double> increment(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<double> d(after.size());
  for (size_t i = 0; i < after.size(); ++i) d[i] = double(after[i]) - double(before[i]);
  return d;
}

// ||out - ref|| / ||ref|| in fp64 (absolute norm when ref is zero); infinity on NaN.
inline double rel_error64(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace rt::test
