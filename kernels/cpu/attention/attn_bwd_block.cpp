// attn_bwd_block on the host: gradients of one K/V block, recomputing P from the saved LSE.
// Per tile of kAttnTileQ queries x kAttnTileK keys (every product on the packed gemm engine):
//   S  = Q K^T * scale*log2(e),  P = exp2(S - lse*log2(e))  (0 where masked or lse = -inf)
//   dP = dO V^T,                 dS = P * (dP - delta) * scale
//   dV += P^T dO,   dK += dS^T Q,   dQ += dS K           (dq_acc, dk_acc, dv_acc f32, accumulate)
// A document mask (AttnMask::docs) classifies tiles as in attn_fwd_block: skipped, unmasked, or masked pair by pair.
#include <cmath>
#include <cstring>

#include "kernels/cpu/attention/attention_common.h"
#include "kernels/cpu/attention/attn_bwd_probs.h"

namespace rt {
namespace cpu {
using attn_bwd_detail::probs_and_dscores_dispatch;

void attn_bwd_block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                    const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask) {
  const char* op = "attn_bwd_block";
  AttnRanges r;
  const AttnDims d =
      attn_bwd_detail::check_bwd_block_args(q, k, v, dout, lse, delta, dq_acc, dk_acc, dv_acc, mask, op, r);
  if (r.q_begin == r.q_end || r.k_begin == r.k_end || d.D == 0) return;
  const bool docs = mask.docs.on();
  AttnMask unmasked;  // a document tile wholly visible runs the unmasked path

  const bool avx2 = use_avx2_fma();
  const int64_t D = d.D;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const float scale2 = scale * kLog2e;
  const int64_t q_row = d.H * D, k_row = d.Hkv * D;  // strides between token rows
  thread_local std::vector<float> scratch;  // grow-only, allocated once per thread
  float* s = attn_scratch(scratch, size_t(2 * kAttnTileQ * kAttnTileK));  // (tq, kAttnTileK) S, then P
  float* dp = s + kAttnTileQ * kAttnTileK;                                // (tq, kAttnTileK) dP, then dS
  thread_local std::vector<uint8_t> vis_buf(size_t(kAttnTileQ * kAttnTileK));  // (tq, kAttnTileK) document mask
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / d.group;
      const int64_t qoff = (b * d.Nq * d.H + h) * D;     // row i of q, dout, dq at + i*q_row
      const int64_t koff = (b * d.Nk * d.Hkv + hk) * D;  // row j of k, v, dk, dv at + j*k_row
      const float* lse_h = lse.ptr<float>() + (b * d.H + h) * d.Nq;      // (Nq)
      const float* delta_h = delta.ptr<float>() + (b * d.H + h) * d.Nq;  // (Nq)
      for (int64_t i0 = r.q_begin; i0 < r.q_end; i0 += kAttnTileQ) {
        const int64_t tq = std::min(kAttnTileQ, r.q_end - i0);
        const float* qt = q.ptr<float>() + qoff + i0 * q_row;      // (tq, D), row stride q_row
        const float* dot = dout.ptr<float>() + qoff + i0 * q_row;  // (tq, D)
        float* dqt = dq_acc.ptr<float>() + qoff + i0 * q_row;      // (tq, D)
        const AttnDocQueryTile qtile = docs ? attn_doc_query_tile(mask.docs, b, i0, tq) : AttnDocQueryTile{};
        for (int64_t j0 = r.k_begin; j0 < r.k_end; j0 += kAttnTileK) {
          const int64_t nj = std::min(kAttnTileK, r.k_end - j0);
          const AttnKeyTile tile = attn_key_tile(mask, unmasked, qtile, b, i0, tq, j0, nj, vis_buf.data());
          if (tile.step == AttnKeyTileStep::skip) continue;
          if (tile.step == AttnKeyTileStep::stop) break;
          const float* kt = k.ptr<float>() + koff + j0 * k_row;  // (nj, D), row stride k_row
          const float* vt = v.ptr<float>() + koff + j0 * k_row;  // (nj, D)
          float* dkt = dk_acc.ptr<float>() + koff + j0 * k_row;  // (nj, D)
          float* dvt = dv_acc.ptr<float>() + koff + j0 * k_row;  // (nj, D)
          std::memset(s, 0, sizeof(float) * size_t(2 * kAttnTileQ * kAttnTileK));  // s and dp
          gemm_strided_accumulate(tq, nj, D, scale2, qt, q_row, 1, kt, 1, k_row, s, kAttnTileK);  // S
          gemm_strided_accumulate(tq, nj, D, 1.f, dot, q_row, 1, vt, 1, k_row, dp, kAttnTileK);   // dP
          probs_and_dscores_dispatch(avx2, s, dp, tq, nj, i0, j0, *tile.mask, tile.vis, lse_h, delta_h, scale);
          gemm_strided_accumulate(nj, D, tq, 1.f, s, 1, kAttnTileK, dot, q_row, 1, dvt, k_row);   // dV += P^T dO
          gemm_strided_accumulate(nj, D, tq, 1.f, dp, 1, kAttnTileK, qt, q_row, 1, dkt, k_row);   // dK += dS^T Q
          gemm_strided_accumulate(tq, D, nj, 1.f, dp, kAttnTileK, 1, kt, k_row, 1, dqt, q_row);   // dQ += dS K
        }
      }
    }
  }
}

}  // namespace cpu
}  // namespace rt
