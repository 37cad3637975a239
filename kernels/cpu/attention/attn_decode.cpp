// attn_decode and attn_decode_partial on the host (the fp32 reference of kernels/cuda/attention/attn_decode.cu):
// one new query per sequence against a KV cache. For each (sequence, K/V head) the cache rows are read once, in
// tiles of kAttnTileK keys, for the whole group of H/Hkv query heads:
//   s (G, tile) = q_group k_tile^T * scale*log2(e);  per head: m' = max(m, rowmax s), p = exp2(s - m'),
//   l = l 2^(m - m') + rowsum p,  acc = acc 2^(m - m') + p v_tile.
// attn_decode finishes each row as attn_fwd_finalize does (out = acc / l, lse = (m + log2 l) ln 2).
// The workspace is checked (the contract is the same on every device: big enough, its arrival counters zero) but
// not used.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {
namespace {

// Cache rows of every sequence, checked against [0, Nk] before anything is written.
std::vector<int64_t> decode_lengths(const Tensor& kv_len, int64_t B, int64_t Nk, const char* op) {
  std::vector<int64_t> lens(size_t(B), Nk);
  if (!kv_len.defined()) return lens;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = kv_len.ptr<int32_t>()[b];
    RT_CHECK(n >= 0 && n <= Nk, op << ": kv_len[" << b << "] = " << n << " is outside the cache's [0, " << Nk
                                   << "] rows; pass the number of filled rows of sequence " << b);
    lens[size_t(b)] = n;
  }
  return lens;
}

// The online-softmax state of the G query heads of K/V head hk of sequence b over cache rows [0, len).
// m, l (G) and acc (G, D) are written (m in the log2 domain).
void decode_group(const AttnDims& d, const float* q, const float* k, const float* v, int64_t b, int64_t hk,
                  int64_t len, float* m, float* l, float* acc) {
  const int64_t G = d.group, D = d.D, kv_stride = d.Hkv * D;
  const float scale2 = kLog2e / std::sqrt(float(D));
  const float* qg = q + (b * d.H + hk * G) * D;               // (G, D): the group's query rows
  const float* kb = k + (b * d.Nk * d.Hkv + hk) * D;          // row j at kb + j * kv_stride
  const float* vb = v + (b * d.Nk * d.Hkv + hk) * D;          // row j at vb + j * kv_stride
  thread_local std::vector<float> s_buf;                      // (G, kAttnTileK) scores, then P
  float* s = attn_scratch(s_buf, size_t(G * kAttnTileK));
  for (int64_t g = 0; g < G; ++g) m[g] = -INFINITY, l[g] = 0.f;
  std::memset(acc, 0, sizeof(float) * size_t(G * D));
  for (int64_t j0 = 0; j0 < len; j0 += kAttnTileK) {
    const int64_t nj = std::min(kAttnTileK, len - j0);
    for (int64_t jj = 0; jj < nj; ++jj) {  // each key row once, for every head of the group
      const float* kr = kb + (j0 + jj) * kv_stride;  // (D)
      for (int64_t g = 0; g < G; ++g) {
        const float* qr = qg + g * D;  // (D)
        float dot = 0.f;
        for (int64_t e = 0; e < D; ++e) dot += qr[e] * kr[e];
        s[g * kAttnTileK + jj] = dot * scale2;
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      float* sg = s + g * kAttnTileK;  // (nj)
      float mx = sg[0];
      for (int64_t jj = 1; jj < nj; ++jj) mx = std::max(mx, sg[jj]);
      const float m_new = std::max(m[g], mx);  // finite: mx is
      const float rescale = std::exp2(m[g] - m_new);  // 0 when m[g] = -inf
      float sum = 0.f;
      for (int64_t jj = 0; jj < nj; ++jj) sum += (sg[jj] = std::exp2(sg[jj] - m_new));
      l[g] = l[g] * rescale + sum;
      m[g] = m_new;
      float* ag = acc + g * D;  // (D)
      for (int64_t e = 0; e < D; ++e) ag[e] *= rescale;
    }
    for (int64_t jj = 0; jj < nj; ++jj) {
      const float* vr = vb + (j0 + jj) * kv_stride;  // (D)
      for (int64_t g = 0; g < G; ++g) {
        const float p = s[g * kAttnTileK + jj];
        float* ag = acc + g * D;  // (D)
        for (int64_t e = 0; e < D; ++e) ag[e] += p * vr[e];
      }
    }
  }
}

AttnDims decode_checks(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_len, const Tensor& work,
                       const char* op) {
  require_cpu_f32(q, op, "q");
  require_cpu_f32(k, op, "k");
  require_cpu_f32(v, op, "v");
  if (kv_len.defined()) require_cpu_i32(kv_len, op, "kv_len");
  const AttnDims d = attn_decode_dims(q, k, v, kv_len, work, op);
  // The CUDA kernel's arrival counters (kernels/attention.h) must be zero: refused here too, so a caller that forgot
  // to zero its workspace fails on the CPU as well, not only with a NaN result on the GPU.
  const int64_t counters = attn_decode_counter_elems(d.B, d.H);
  const uint32_t* bits = static_cast<const uint32_t*>(work.data);  // (counters) u32
  for (int64_t i = 0; i < counters; ++i)
    RT_CHECK(bits[i] == 0, op << ": work[" << i << "] is not zero, but the first " << counters
                              << " elements of work (the split kernel's arrival counters) must be; zero the "
                                 "workspace once when you allocate it (fill(work, 0.f)), and again for another B or H");
  return d;
}

}  // namespace

void attn_decode_partial(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_len, Tensor work,
                         AttnState& state) {
  const char* op = "attn_decode_partial";
  const AttnDims d = decode_checks(q, k, v, kv_len, work, op);
  require_cpu_f32(state.acc, op, "state.acc");
  require_cpu_f32(state.m, op, "state.m");
  require_cpu_f32(state.l, op, "state.l");
  check_attn_decode_state(d, state, op);
  const std::vector<int64_t> lens = decode_lengths(kv_len, d.B, d.Nk, op);
  for (int64_t b = 0; b < d.B; ++b) {
    const int64_t len = lens[size_t(b)];
    for (int64_t hk = 0; hk < d.Hkv; ++hk) {
      const int64_t h0 = b * d.H + hk * d.group;  // (B,H) row of the group's first head
      decode_group(d, q.ptr<float>(), k.ptr<float>(), v.ptr<float>(), b, hk, len, state.m.ptr<float>() + h0,
                   state.l.ptr<float>() + h0, state.acc.ptr<float>() + h0 * d.D);
    }
  }
}

void attn_decode(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_len, Tensor work, Tensor out,
                 Tensor lse) {
  const char* op = "attn_decode";
  const AttnDims d = decode_checks(q, k, v, kv_len, work, op);
  require_cpu_f32(out, op, "out");
  require_cpu_f32(lse, op, "lse");
  check_shape(out, {d.B, 1, d.H, d.D}, op, "out (B,1,H,D)");
  check_shape(lse, {d.B, d.H, 1}, op, "lse (B,H,1)");
  const std::vector<int64_t> lens = decode_lengths(kv_len, d.B, d.Nk, op);
  std::vector<float> m(size_t(d.group)), l(size_t(d.group)), acc(size_t(d.group * d.D));  // one group's state
  for (int64_t b = 0; b < d.B; ++b) {
    const int64_t len = lens[size_t(b)];
    for (int64_t hk = 0; hk < d.Hkv; ++hk) {
      decode_group(d, q.ptr<float>(), k.ptr<float>(), v.ptr<float>(), b, hk, len, m.data(), l.data(), acc.data());
      for (int64_t g = 0; g < d.group; ++g) {
        const int64_t row = b * d.H + hk * d.group + g;  // (B,H) index; out (B,1,H,D) has the same row order
        float* o = out.ptr<float>() + row * d.D;          // (D)
        const float inv = l[g] > 0.f ? 1.f / l[g] : 0.f;
        for (int64_t e = 0; e < d.D; ++e) o[e] = acc[size_t(g * d.D + e)] * inv;
        lse.ptr<float>()[row] = l[g] > 0.f ? (m[g] + std::log2(l[g])) * kLn2 : -INFINITY;
      }
    }
  }
}

}  // namespace cpu
}  // namespace rt
