// attn_fwd_block on the host: continues the fp32 online-softmax state with one K/V block.
// Tiled: a tile of kAttnTileQ query rows meets a tile of kAttnTileK keys.
//   S (tq,tk)  = Q_tile K_tile^T * scale*log2(e)          (packed gemm engine)
//   per row:     m_new = max(m, rowmax S), P = exp2(S - m_new), l = l*exp2(m - m_new) + rowsum P,
//                acc *= exp2(m - m_new)
//   acc (tq,D) += P V_tile                                (packed gemm engine)
// Causal key tiles wholly after a query tile are skipped; within a tile the visible keys of a row are a
// prefix, so masked entries are set to P = 0 directly and (-inf) - (-inf) is never evaluated.
// With a document mask (AttnMask::docs) tiles are classified by position min/max: skipped, run unmasked, or
// masked pair by pair (vis): a row whose visible keys are one run is summed over the run (as the causal prefix),
// else a masked score is replaced by one that exp2 turns into exactly 0.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {
namespace {

// Online-softmax update of the rows of one tile; s (tq, kAttnTileK) holds log2-domain scores on entry
// and P on exit (zero where masked or past nj).
// vis (tq, kAttnTileK), when not null, is the document mask of the tile (1 = visible); else the mask's prefix rule.
__attribute__((always_inline)) inline void softmax_update(float* s, int64_t tq, int64_t nj, int64_t i0, int64_t j0,
                                                          const AttnMask& mask, const uint8_t* vis, float* m,
                                                          float* l, float* acc, int64_t D) {
  for (int64_t r = 0; r < tq; ++r) {
    float* srow = s + r * kAttnTileK;  // (nj)
    const int64_t i = i0 + r;
    if (vis) {  // document edge inside the tile: masked pair by pair
      const uint8_t* vrow = vis + r * kAttnTileK;  // (nj)
      // The visible keys of a row with sorted keys are one run [a, e) (a = 0 when its document began before
      // the tile); unsorted keys (any chunk assignment) may scatter them.
      int64_t a = 0;
      while (a < nj && !vrow[a]) ++a;
      if (a == nj) {  // nothing visible in this tile
        std::memset(srow, 0, sizeof(float) * size_t(nj));
        continue;
      }
      int64_t e = a;
      while (e < nj && vrow[e]) ++e;
      const bool one_run = std::find(vrow + e, vrow + nj, uint8_t(1)) == vrow + nj;
      float mx = -INFINITY;
      for (int64_t jj = a; jj < nj; ++jj)
        if (vrow[jj]) mx = srow[jj] > mx ? srow[jj] : mx;
      const float m_old = m[i];
      const float m_new = m_old > mx ? m_old : mx;
      const float rescale = std::exp2(m_old - m_new);
      float sum;
      if (one_run) {
        // Summed over the run exactly as the causal path sums its visible prefix: a sample that is one
        // document gives bit-identical results with and without the document mask.
        sum = float(simd_exp2_sum(srow + a, srow + a, e - a, m_new, 1.f));
        std::memset(srow, 0, sizeof(float) * size_t(a));
        std::memset(srow + e, 0, sizeof(float) * size_t(nj - e));
      } else {
        for (int64_t jj = 0; jj < nj; ++jj)
          if (!vrow[jj]) srow[jj] = m_new - 1000.f;  // exp2 gives exactly 0 (below -126)
        sum = float(simd_exp2_sum(srow, srow, nj, m_new, 1.f));
      }
      l[i] = l[i] * rescale + sum;
      m[i] = m_new;
      if (rescale != 1.f) {
        float* o = acc + i * D;  // (D)
        for (int64_t e = 0; e < D; ++e) o[e] *= rescale;
      }
      continue;
    }
    const int64_t nv = attn_visible_keys(mask, i, j0, nj);
    if (nv == 0) {
      std::memset(srow, 0, sizeof(float) * size_t(nj));
      continue;
    }
    float mx = srow[0];
    for (int64_t jj = 1; jj < nv; ++jj) mx = srow[jj] > mx ? srow[jj] : mx;
    const float m_old = m[i];
    const float m_new = m_old > mx ? m_old : mx;  // finite, since mx is
    const float rescale = std::exp2(m_old - m_new);  // 0 when m_old = -inf
    const float sum = float(simd_exp2_sum(srow, srow, nv, m_new, 1.f));
    for (int64_t jj = nv; jj < nj; ++jj) srow[jj] = 0.f;
    l[i] = l[i] * rescale + sum;
    m[i] = m_new;
    if (rescale != 1.f) {
      float* o = acc + i * D;  // (D)
      for (int64_t e = 0; e < D; ++e) o[e] *= rescale;
    }
  }
}

__attribute__((target("avx2,fma"))) void softmax_update_avx2(float* s, int64_t tq, int64_t nj, int64_t i0,
                                                              int64_t j0, const AttnMask& mask, const uint8_t* vis,
                                                              float* m, float* l, float* acc, int64_t D) {
  softmax_update(s, tq, nj, i0, j0, mask, vis, m, l, acc, D);
}
void softmax_update_baseline(float* s, int64_t tq, int64_t nj, int64_t i0, int64_t j0, const AttnMask& mask,
                             const uint8_t* vis, float* m, float* l, float* acc, int64_t D) {
  softmax_update(s, tq, nj, i0, j0, mask, vis, m, l, acc, D);
}

}  // namespace

void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask) {
  const char* op = "attn_fwd_block";
  const AttnDims d = attn_dims(q, k, v, op);
  require_cpu_f32(state.acc, op, "state.acc");
  require_cpu_f32(state.m, op, "state.m");
  require_cpu_f32(state.l, op, "state.l");
  check_attn_state_shapes(d, state, op);
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  check_attn_docs(mask.docs, d.Nq, d.Nk, op);
  if (r.q_begin == r.q_end || r.k_begin == r.k_end || d.D == 0) return;
  const bool docs = mask.docs.on();
  AttnMask unmasked;  // a document tile wholly visible runs the unmasked path

  const bool avx2 = use_avx2_fma();
  const int64_t D = d.D;
  const float scale2 = float(1.0 / std::sqrt(double(D))) * kLog2e;
  const int64_t q_row = d.H * D, k_row = d.Hkv * D;  // strides between token rows
  thread_local std::vector<float> s_buf;  // grow-only, allocated once per thread
  float* s = attn_scratch(s_buf, size_t(kAttnTileQ * kAttnTileK));  // (tq, kAttnTileK) scores, then P
  thread_local std::vector<uint8_t> vis_buf(size_t(kAttnTileQ * kAttnTileK));  // (tq, kAttnTileK) document mask
  const float* pq = q.ptr<float>();     // (B,Nq,H,D)
  const float* pk = k.ptr<float>();     // (B,Nk,Hkv,D)
  const float* pv = v.ptr<float>();     // (B,Nk,Hkv,D)
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / d.group;
      const float* qh = pq + (b * d.Nq * d.H + h) * D;     // row i at qh + i*q_row
      const float* kh = pk + (b * d.Nk * d.Hkv + hk) * D;  // row j at kh + j*k_row
      const float* vh = pv + (b * d.Nk * d.Hkv + hk) * D;
      const int64_t bh = b * d.H + h;
      float* acc_h = state.acc.ptr<float>() + bh * d.Nq * D;  // (Nq, D)
      float* m_h = state.m.ptr<float>() + bh * d.Nq;          // (Nq)
      float* l_h = state.l.ptr<float>() + bh * d.Nq;          // (Nq)
      for (int64_t i0 = r.q_begin; i0 < r.q_end; i0 += kAttnTileQ) {
        const int64_t tq = std::min(kAttnTileQ, r.q_end - i0);
        const AttnDocQueryTile qtile = docs ? attn_doc_query_tile(mask.docs, b, i0, tq) : AttnDocQueryTile{};
        for (int64_t j0 = r.k_begin; j0 < r.k_end; j0 += kAttnTileK) {
          const int64_t nj = std::min(kAttnTileK, r.k_end - j0);
          const AttnKeyTile tile = attn_key_tile(mask, unmasked, qtile, b, i0, tq, j0, nj, vis_buf.data());
          if (tile.step == AttnKeyTileStep::skip) continue;
          if (tile.step == AttnKeyTileStep::stop) break;
          std::memset(s, 0, sizeof(float) * size_t(kAttnTileQ * kAttnTileK));
          gemm_strided_accumulate(tq, nj, D, scale2, qh + i0 * q_row, q_row, 1, kh + j0 * k_row, 1, k_row, s,
                                  kAttnTileK);
          if (avx2)
            softmax_update_avx2(s, tq, nj, i0, j0, *tile.mask, tile.vis, m_h, l_h, acc_h, D);
          else
            softmax_update_baseline(s, tq, nj, i0, j0, *tile.mask, tile.vis, m_h, l_h, acc_h, D);
          gemm_strided_accumulate(tq, D, nj, 1.f, s, kAttnTileK, 1, vh + j0 * k_row, k_row, 1, acc_h + i0 * D, D);
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace rt
