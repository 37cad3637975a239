// attn_bwd_block on the host: gradients of one K/V block, recomputing P = exp2(S*log2e - lse*log2e).
//   dP = dO V^T, dS = P * (dP - delta), dQ += scale dS K, dK += scale dS^T Q, dV += P^T dO.
// Same tiling as the forward: key and value tiles are packed transposed so the S and dP rows are
// vectorised axpys over D. dq_acc, dk_acc and dv_acc accumulate (+=) in f32.
#include <cmath>

#include "kernels/cpu/attention_common.h"

namespace rt {
namespace cpu {
namespace {

struct BwdArgs {
  const float* q;      // (B,Nq,H,D)
  const float* k;      // (B,Nk,Hkv,D)
  const float* v;      // (B,Nk,Hkv,D)
  const float* dout;   // (B,Nq,H,D)
  const float* lse;    // (B,H,Nq)
  const float* delta;  // (B,H,Nq)
  float* dq;           // (B,Nq,H,D)
  float* dk;           // (B,Nk,Hkv,D)
  float* dv;           // (B,Nk,Hkv,D)
  AttnDims dims;
  AttnRanges ranges;
  AttnMask mask;
  float* kt;  // (D, kAttnTileK) scratch
  float* vt;  // (D, kAttnTileK) scratch
  float* p;   // (kAttnTileK) scratch
  float* dp;  // (kAttnTileK) scratch
};

__attribute__((always_inline)) inline void bwd_body(const BwdArgs& a) {
  const AttnDims& d = a.dims;
  const int64_t D = d.D;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const float scale2 = scale * kLog2e;
  const int64_t q_row = d.H * D, k_row = d.Hkv * D;  // strides between token rows
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / d.group;
      const int64_t qoff = (b * d.Nq * d.H + h) * D;     // row i of q, dout, dq at +i*q_row
      const int64_t koff = (b * d.Nk * d.Hkv + hk) * D;  // row j of k, v, dk, dv at +j*k_row
      const float* lse_h = a.lse + (b * d.H + h) * d.Nq;      // (Nq)
      const float* delta_h = a.delta + (b * d.H + h) * d.Nq;  // (Nq)
      for (int64_t i0 = a.ranges.q_begin; i0 < a.ranges.q_end; i0 += kAttnTileQ) {
        const int64_t i1 = std::min(i0 + kAttnTileQ, a.ranges.q_end);
        for (int64_t j0 = a.ranges.k_begin; j0 < a.ranges.k_end; j0 += kAttnTileK) {
          const int64_t nj = std::min(kAttnTileK, a.ranges.k_end - j0);
          if (attn_visible_keys(a.mask, i1 - 1, j0, nj) == 0) break;  // this and later key tiles are masked
          attn_pack_transposed(a.k + koff + j0 * k_row, k_row, nj, D, a.kt);
          attn_pack_transposed(a.v + koff + j0 * k_row, k_row, nj, D, a.vt);
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t nv = attn_visible_keys(a.mask, i, j0, nj);
            const float lse = lse_h[i];
            if (nv == 0 || lse == -INFINITY) continue;  // no visible key: P = 0
            const float lse2 = lse * kLog2e;
            const float* qi = a.q + qoff + i * q_row;    // (D)
            const float* doi = a.dout + qoff + i * q_row;  // (D)
            float* dqi = a.dq + qoff + i * q_row;        // (D)
            attn_row_scores(qi, scale2, a.kt, D, nv, a.p);
            for (int64_t jj = 0; jj < nv; ++jj) a.p[jj] = std::exp2(a.p[jj] - lse2);
            attn_row_scores(doi, 1.f, a.vt, D, nv, a.dp);
            const float di = delta_h[i];
            for (int64_t jj = 0; jj < nv; ++jj) {
              const float pj = a.p[jj];
              const float ds = pj * (a.dp[jj] - di) * scale;  // scale folded in: dS for dQ and dK
              const float* kj = a.k + koff + (j0 + jj) * k_row;  // (D)
              float* dkj = a.dk + koff + (j0 + jj) * k_row;      // (D)
              float* dvj = a.dv + koff + (j0 + jj) * k_row;      // (D)
              for (int64_t e = 0; e < D; ++e) {
                dqi[e] += ds * kj[e];
                dkj[e] += ds * qi[e];
                dvj[e] += pj * doi[e];
              }
            }
          }
        }
      }
    }
  }
}

__attribute__((target("avx2,fma"))) void bwd_avx2(const BwdArgs& a) { bwd_body(a); }
void bwd_baseline(const BwdArgs& a) { bwd_body(a); }

}  // namespace

void attn_bwd_block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                    const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask) {
  const char* op = "attn_bwd_block";
  const AttnDims d = attn_dims(q, k, v, op);
  require_cpu_f32(dout, op, "dout");
  require_cpu_f32(lse, op, "lse");
  require_cpu_f32(delta, op, "delta");
  require_cpu_f32(dq_acc, op, "dq_acc");
  require_cpu_f32(dk_acc, op, "dk_acc");
  require_cpu_f32(dv_acc, op, "dv_acc");
  check_shape(dout, {d.B, d.Nq, d.H, d.D}, op, "dout (B,Nq,H,D)");
  check_shape(lse, {d.B, d.H, d.Nq}, op, "lse (B,H,Nq)");
  check_shape(delta, {d.B, d.H, d.Nq}, op, "delta (B,H,Nq)");
  check_shape(dq_acc, {d.B, d.Nq, d.H, d.D}, op, "dq_acc (B,Nq,H,D)");
  check_shape(dk_acc, {d.B, d.Nk, d.Hkv, d.D}, op, "dk_acc (B,Nk,Hkv,D)");
  check_shape(dv_acc, {d.B, d.Nk, d.Hkv, d.D}, op, "dv_acc (B,Nk,Hkv,D)");
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  if (r.q_begin == r.q_end || r.k_begin == r.k_end || d.D == 0) return;

  thread_local std::vector<float> kt_buf, vt_buf, p_buf, dp_buf;
  BwdArgs a{q.ptr<float>(), k.ptr<float>(), v.ptr<float>(), dout.ptr<float>(), lse.ptr<float>(),
            delta.ptr<float>(), dq_acc.ptr<float>(), dk_acc.ptr<float>(), dv_acc.ptr<float>(), d, r, mask,
            attn_scratch(kt_buf, size_t(d.D * kAttnTileK)), attn_scratch(vt_buf, size_t(d.D * kAttnTileK)),
            attn_scratch(p_buf, size_t(kAttnTileK)), attn_scratch(dp_buf, size_t(kAttnTileK))};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    bwd_avx2(a);
  else
    bwd_baseline(a);
}

}  // namespace cpu
}  // namespace rt
