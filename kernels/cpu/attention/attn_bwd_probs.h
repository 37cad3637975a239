// What attn_bwd_block and attn_bwd_block_fp8 (kernels/cpu/attention) share: their argument checks, and the step
// between the backward's products: the score tile S into P = exp2(S - lse log2 e) and the dP tile into
// dS = P (dP - delta) scale, row by row, with the tile's mask (the prefix rule, or a document tile's pair-by-pair
// `vis`); masked pairs and rows with lse = -inf get 0 in both.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {
namespace attn_bwd_detail {

// attn_bwd_block's argument checks, shared with attn_bwd_block_fp8: the shapes, every gradient tensor f32 on the CPU,
// the document mask; returns the dims and fills the mask's row ranges.
inline AttnDims check_bwd_block_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                     const Tensor& lse, const Tensor& delta, const Tensor& dq_acc, const Tensor& dk_acc,
                                     const Tensor& dv_acc, const AttnMask& mask, const char* op, AttnRanges& r) {
  const AttnDims d = attn_dims(q, k, v, op);
  require_cpu_f32(dout, op, "dout");
  require_cpu_f32(lse, op, "lse");
  require_cpu_f32(delta, op, "delta");
  require_cpu_f32(dq_acc, op, "dq_acc");
  require_cpu_f32(dk_acc, op, "dk_acc");
  require_cpu_f32(dv_acc, op, "dv_acc");
  check_attn_bwd_shapes(d, dout, lse, delta, dq_acc, dk_acc, dv_acc, op);
  r = attn_ranges(mask, d.Nq, d.Nk, op);
  check_attn_docs(mask.docs, d.Nq, d.Nk, op);
  return d;
}

// Turns the score tile s into P and the dP tile dp into dS, row by row.
// vis (tq, kAttnTileK), when not null, is the document mask of the tile (1 = visible); else the mask's prefix rule.
__attribute__((always_inline)) inline void probs_and_dscores(float* s, float* dp, int64_t tq, int64_t nj, int64_t i0,
                                                             int64_t j0, const AttnMask& mask, const uint8_t* vis,
                                                             const float* lse, const float* delta, float scale) {
  for (int64_t r = 0; r < tq; ++r) {
    float* p = s + r * kAttnTileK;    // (nj)
    float* ds = dp + r * kAttnTileK;  // (nj)
    const int64_t i = i0 + r;
    if (vis) {  // document edge inside the tile
      const uint8_t* vrow = vis + r * kAttnTileK;  // (nj)
      if (lse[i] == -INFINITY) {
        for (int64_t jj = 0; jj < nj; ++jj) p[jj] = ds[jj] = 0.f;
        continue;
      }
      const float lse2 = lse[i] * kLog2e;
      for (int64_t jj = 0; jj < nj; ++jj)
        if (!vrow[jj]) p[jj] = lse2 - 1000.f;  // exp2 gives exactly 0
      simd_exp2_sum(p, p, nj, lse2, 1.f);
      const float di = delta[i];
      for (int64_t jj = 0; jj < nj; ++jj) ds[jj] = vrow[jj] ? p[jj] * (ds[jj] - di) * scale : 0.f;
      continue;
    }
    const int64_t nv = lse[i] == -INFINITY ? 0 : attn_visible_keys(mask, i, j0, nj);
    const float lse2 = lse[i] * kLog2e;
    const float di = delta[i];
    simd_exp2_sum(p, p, nv, lse2, 1.f);
    for (int64_t jj = 0; jj < nv; ++jj) ds[jj] = p[jj] * (ds[jj] - di) * scale;
    for (int64_t jj = nv; jj < nj; ++jj) p[jj] = ds[jj] = 0.f;
  }
}

__attribute__((target("avx2,fma"))) inline void probs_and_dscores_avx2(float* s, float* dp, int64_t tq,
                                                                        int64_t nj, int64_t i0, int64_t j0,
                                                                        const AttnMask& mask, const uint8_t* vis,
                                                                        const float* lse, const float* delta,
                                                                        float scale) {
  probs_and_dscores(s, dp, tq, nj, i0, j0, mask, vis, lse, delta, scale);
}
inline void probs_and_dscores_baseline(float* s, float* dp, int64_t tq, int64_t nj, int64_t i0, int64_t j0,
                                       const AttnMask& mask, const uint8_t* vis, const float* lse, const float* delta,
                                       float scale) {
  probs_and_dscores(s, dp, tq, nj, i0, j0, mask, vis, lse, delta, scale);
}

// The avx2 or the baseline build, as the CPU supports.
inline void probs_and_dscores_dispatch(bool avx2, float* s, float* dp, int64_t tq, int64_t nj, int64_t i0, int64_t j0,
                                       const AttnMask& mask, const uint8_t* vis, const float* lse, const float* delta,
                                       float scale) {
  if (avx2)
    probs_and_dscores_avx2(s, dp, tq, nj, i0, j0, mask, vis, lse, delta, scale);
  else
    probs_and_dscores_baseline(s, dp, tq, nj, i0, j0, mask, vis, lse, delta, scale);
}

}  // namespace attn_bwd_detail
}  // namespace cpu
}  // namespace rt
