// attn_fwd_block on the host: continues the fp32 online-softmax state with one K/V block.
// Tiled: a tile of kAttnTileQ query rows meets a tile of kAttnTileK keys; the key tile is packed transposed
// so every score row is a vectorised axpy over D. Scores are prescaled by scale*log2(e) and exp2 is used.
// Causal tiles that lie wholly above the diagonal are skipped; within a tile, visible keys are a prefix,
// so masked scores are never computed and (-inf) - (-inf) never happens.
#include <cmath>

#include "kernels/cpu/attention_common.h"

namespace rt {
namespace cpu {
namespace {

struct FwdArgs {
  const float* q;    // (B,Nq,H,D)
  const float* k;    // (B,Nk,Hkv,D)
  const float* v;    // (B,Nk,Hkv,D)
  float* acc;        // (B,H,Nq,D)
  float* m;          // (B,H,Nq)
  float* l;          // (B,H,Nq)
  AttnDims dims;
  AttnRanges ranges;
  AttnMask mask;
  float* kt;         // (D, kAttnTileK) scratch
  float* s;          // (kAttnTileK) scratch
};

__attribute__((always_inline)) inline void fwd_body(const FwdArgs& a) {
  const AttnDims& d = a.dims;
  const int64_t D = d.D;
  const float scale2 = float(1.0 / std::sqrt(double(D))) * kLog2e;
  const int64_t q_row = d.H * D, k_row = d.Hkv * D;  // strides between token rows
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / d.group;
      const float* qh = a.q + (b * d.Nq * d.H + h) * D;     // row i at qh + i*q_row
      const float* kh = a.k + (b * d.Nk * d.Hkv + hk) * D;  // row j at kh + j*k_row
      const float* vh = a.v + (b * d.Nk * d.Hkv + hk) * D;
      const int64_t bh = b * d.H + h;
      float* acc_h = a.acc + bh * d.Nq * D;  // (Nq, D)
      float* m_h = a.m + bh * d.Nq;          // (Nq)
      float* l_h = a.l + bh * d.Nq;          // (Nq)
      for (int64_t i0 = a.ranges.q_begin; i0 < a.ranges.q_end; i0 += kAttnTileQ) {
        const int64_t i1 = std::min(i0 + kAttnTileQ, a.ranges.q_end);
        for (int64_t j0 = a.ranges.k_begin; j0 < a.ranges.k_end; j0 += kAttnTileK) {
          const int64_t nj = std::min(kAttnTileK, a.ranges.k_end - j0);
          if (attn_visible_keys(a.mask, i1 - 1, j0, nj) == 0) break;  // this and later key tiles are masked
          attn_pack_transposed(kh + j0 * k_row, k_row, nj, D, a.kt);
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t nv = attn_visible_keys(a.mask, i, j0, nj);
            if (nv == 0) continue;
            float* s = a.s;  // (nv) log2-domain scores
            attn_row_scores(qh + i * q_row, scale2, a.kt, D, nv, s);
            float mx = s[0];
            for (int64_t jj = 1; jj < nv; ++jj) mx = s[jj] > mx ? s[jj] : mx;
            const float m_old = m_h[i];
            const float m_new = m_old > mx ? m_old : mx;  // finite: mx is
            const float rescale = std::exp2(m_old - m_new);  // 0 when m_old = -inf
            float sum = 0.f;
            for (int64_t jj = 0; jj < nv; ++jj) {
              s[jj] = std::exp2(s[jj] - m_new);
              sum += s[jj];
            }
            l_h[i] = l_h[i] * rescale + sum;
            m_h[i] = m_new;
            float* o = acc_h + i * D;  // (D)
            if (rescale != 1.f)
              for (int64_t e = 0; e < D; ++e) o[e] *= rescale;
            for (int64_t jj = 0; jj < nv; ++jj) {
              const float p = s[jj];
              const float* vr = vh + (j0 + jj) * k_row;  // (D)
              for (int64_t e = 0; e < D; ++e) o[e] += p * vr[e];
            }
          }
        }
      }
    }
  }
}

__attribute__((target("avx2,fma"))) void fwd_avx2(const FwdArgs& a) { fwd_body(a); }
void fwd_baseline(const FwdArgs& a) { fwd_body(a); }

}  // namespace

void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask) {
  const char* op = "attn_fwd_block";
  const AttnDims d = attn_dims(q, k, v, op);
  require_cpu_f32(state.acc, op, "state.acc");
  require_cpu_f32(state.m, op, "state.m");
  require_cpu_f32(state.l, op, "state.l");
  check_shape(state.acc, {d.B, d.H, d.Nq, d.D}, op, "state.acc (B,H,Nq,D)");
  check_shape(state.m, {d.B, d.H, d.Nq}, op, "state.m (B,H,Nq)");
  check_shape(state.l, {d.B, d.H, d.Nq}, op, "state.l (B,H,Nq)");
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  if (r.q_begin == r.q_end || r.k_begin == r.k_end || d.D == 0) return;

  thread_local std::vector<float> kt_buf, s_buf;
  FwdArgs a{q.ptr<float>(), k.ptr<float>(), v.ptr<float>(), state.acc.ptr<float>(), state.m.ptr<float>(),
            state.l.ptr<float>(), d, r, mask, attn_scratch(kt_buf, size_t(d.D * kAttnTileK)),
            attn_scratch(s_buf, size_t(kAttnTileK))};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    fwd_avx2(a);
  else
    fwd_baseline(a);
}

}  // namespace cpu
}  // namespace rt
