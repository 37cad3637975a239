// attn_bwd_block_fp8 on the host (the contract and the scale groups: kernels/attn_fp8.h). attn_bwd_block's tile loop
// with the tiles on 128-row boundaries of the tensors, and per (b, h):
//   Q, dO (Nq, D) and K (Nk, D) quantized once per 128-row block (E4M3 values and a factor per block);
//   per tile: S = Q K^T and dP = dO V^T in f32 on the unquantized operands, P and dS (attn_bwd_probs.h), then
//     P -> E4M3 (x448),                dV += (1/448 x f_dO) (P^T dO)     on E4M3 values,
//     dS -> E4M3 (one amax per tile),  dK += (f_dS x f_Q) (dS^T Q),  dQ += (f_dS x f_K) (dS K),
//   each tile product in f32 (the packed gemm engine), scaled once and added to the f32 accumulators.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attn_fp8.h"
#include "kernels/cpu/attention/attention_common.h"
#include "kernels/cpu/attention/attn_bwd_probs.h"

namespace rt {
namespace cpu {
namespace {

// One operand head slice quantized per 128-row block: values (rows, D) contiguous, factors (ceil(rows / 128)).
struct QuantizedRows {
  std::vector<float> values;   // (rows, D) E4M3 values (unscaled)
  std::vector<float> factors;  // (ceil(rows / 128)) 1 / s per row block
  void quantize(const float* x, int64_t rows, int64_t row_stride, int64_t D) {
    if (values.size() < size_t(rows * D)) values.resize(size_t(rows * D));  // grow-only
    const size_t blocks = size_t((rows + kAttnFp8RowBlock - 1) / kAttnFp8RowBlock);
    if (factors.size() < blocks) factors.resize(blocks);
    attn_fp8_quantize_row_blocks(x, rows, row_stride, D, values.data(), factors.data());
  }
  const float* row(int64_t r, int64_t D) const { return values.data() + r * D; }
  float factor_of_row(int64_t r) const { return factors[size_t(r / kAttnFp8RowBlock)]; }
};

// The end of the 128-row block holding row `begin`, clipped to `end`.
inline int64_t block_end(int64_t begin, int64_t end) {
  return std::min(end, (begin / kAttnFp8RowBlock + 1) * kAttnFp8RowBlock);
}

}  // namespace

void attn_bwd_block_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                        const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask) {
  const char* op = "attn_bwd_block_fp8";
  static_assert(kAttnTileQ == kAttnFp8RowBlock && kAttnTileK == kAttnFp8RowBlock,
                "the FP8 backward's tiles are the scale groups' 128-row blocks");
  AttnRanges r;
  const AttnDims d =
      attn_bwd_detail::check_bwd_block_args(q, k, v, dout, lse, delta, dq_acc, dk_acc, dv_acc, mask, op, r);
  RT_CHECK(attn_fp8_head_dim_supported(d.D),
           op << ": head dim D=" << d.D << " is not supported by the FP8 attention (64 or 128, the FP8 kernel's "
              "tiles); change model.d_model / model.n_head, or set fp8.attention: false");
  if (r.q_begin == r.q_end || r.k_begin == r.k_end) return;
  const bool docs = mask.docs.on();
  AttnMask unmasked;  // a document tile wholly visible runs the unmasked path

  const bool avx2 = use_avx2_fma();
  const int64_t D = d.D;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const float scale2 = scale * kLog2e;
  const float p_factor = fp8_factor_from_scale(kAttnFp8PScale);
  const int64_t q_row = d.H * D, k_row = d.Hkv * D;  // strides between token rows
  thread_local std::vector<float> scratch;  // grow-only, allocated once per thread
  float* s = attn_scratch(scratch, size_t(2 * kAttnTileQ * kAttnTileK));  // (tq, kAttnTileK) S, then P, then P's E4M3
  float* dp = s + kAttnTileQ * kAttnTileK;                                // (tq, kAttnTileK) dP, then dS, dS's E4M3
  thread_local std::vector<uint8_t> vis_buf(size_t(kAttnTileQ * kAttnTileK));  // (tq, kAttnTileK) document mask
  thread_local QuantizedRows q8, do8, k8;  // (Nq, D), (Nq, D), (Nk, D) of one head
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / d.group;
      const int64_t qoff = (b * d.Nq * d.H + h) * D;     // row i of q, dout, dq at + i*q_row
      const int64_t koff = (b * d.Nk * d.Hkv + hk) * D;  // row j of k, v, dk, dv at + j*k_row
      const float* lse_h = lse.ptr<float>() + (b * d.H + h) * d.Nq;      // (Nq)
      const float* delta_h = delta.ptr<float>() + (b * d.H + h) * d.Nq;  // (Nq)
      q8.quantize(q.ptr<float>() + qoff, d.Nq, q_row, D);
      do8.quantize(dout.ptr<float>() + qoff, d.Nq, q_row, D);
      k8.quantize(k.ptr<float>() + koff, d.Nk, k_row, D);
      for (int64_t i0 = r.q_begin, i1; i0 < r.q_end; i0 = i1) {
        i1 = block_end(i0, r.q_end);
        const int64_t tq = i1 - i0;
        const float* qt = q.ptr<float>() + qoff + i0 * q_row;      // (tq, D), row stride q_row
        const float* dot = dout.ptr<float>() + qoff + i0 * q_row;  // (tq, D)
        float* dqt = dq_acc.ptr<float>() + qoff + i0 * q_row;      // (tq, D)
        const float* q8t = q8.row(i0, D);                           // (tq, D) contiguous, E4M3 values
        const float* do8t = do8.row(i0, D);                         // (tq, D)
        const float q_factor = q8.factor_of_row(i0), do_factor = do8.factor_of_row(i0);
        const AttnDocQueryTile qtile = docs ? attn_doc_query_tile(mask.docs, b, i0, tq) : AttnDocQueryTile{};
        for (int64_t j0 = r.k_begin, j1; j0 < r.k_end; j0 = j1) {
          j1 = block_end(j0, r.k_end);
          const int64_t nj = j1 - j0;
          const AttnKeyTile tile = attn_key_tile(mask, unmasked, qtile, b, i0, tq, j0, nj, vis_buf.data());
          if (tile.step == AttnKeyTileStep::skip) continue;
          if (tile.step == AttnKeyTileStep::stop) break;
          const float* kt = k.ptr<float>() + koff + j0 * k_row;  // (nj, D), row stride k_row
          const float* vt = v.ptr<float>() + koff + j0 * k_row;  // (nj, D)
          float* dkt = dk_acc.ptr<float>() + koff + j0 * k_row;  // (nj, D)
          float* dvt = dv_acc.ptr<float>() + koff + j0 * k_row;  // (nj, D)
          const float* k8t = k8.row(j0, D);                      // (nj, D) contiguous, E4M3 values
          const float k_factor = k8.factor_of_row(j0);
          std::memset(s, 0, sizeof(float) * size_t(2 * kAttnTileQ * kAttnTileK));  // s and dp
          gemm_strided_accumulate(tq, nj, D, scale2, qt, q_row, 1, kt, 1, k_row, s, kAttnTileK);  // S (f32)
          gemm_strided_accumulate(tq, nj, D, 1.f, dot, q_row, 1, vt, 1, k_row, dp, kAttnTileK);   // dP (f32)
          attn_bwd_detail::probs_and_dscores_dispatch(avx2, s, dp, tq, nj, i0, j0, *tile.mask, tile.vis, lse_h,
                                                      delta_h, scale);
          attn_fp8_quantize_tile(s, tq, nj, kAttnTileK, kAttnFp8PScale);  // P's E4M3 values
          gemm_strided_accumulate(nj, D, tq, p_factor * do_factor, s, 1, kAttnTileK, do8t, D, 1, dvt,
                                  k_row);  // dV += P^T dO
          const float ds_scale = fp8_scale_from_amax(attn_fp8_tile_amax(dp, tq, nj, kAttnTileK));
          const float ds_factor = fp8_factor_from_scale(ds_scale);
          attn_fp8_quantize_tile(dp, tq, nj, kAttnTileK, ds_scale);  // dS's E4M3 values
          gemm_strided_accumulate(nj, D, tq, ds_factor * q_factor, dp, 1, kAttnTileK, q8t, D, 1, dkt,
                                  k_row);  // dK += dS^T Q
          gemm_strided_accumulate(tq, D, nj, ds_factor * k_factor, dp, kAttnTileK, 1, k8t, D, 1, dqt,
                                  q_row);  // dQ += dS K
        }
      }
    }
  }
}

void attn_bwd_block_fresh_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                              const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask) {
  cpu::fill(dk, 0.f);  // qualified: rt::fill is found by ADL too
  cpu::fill(dv, 0.f);
  cpu::attn_bwd_block_fp8(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);
}

void attn_bwd_block_fresh_two_kv_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2,
                                     const Tensor& v2, const Tensor& dout, const Tensor& lse, const Tensor& delta,
                                     Tensor dq_acc, Tensor dk, Tensor dv, Tensor dk2, Tensor dv2,
                                     const AttnMask& mask) {
  int64_t list_rows = 0;
  const AttnDims d = attn_two_kv_dims(q, k, v, k2, v2, mask, list_rows, "attn_bwd_block_fresh_two_kv_fp8");
  AttnMask second = mask;  // source 2's keys: the list's rows from attn_second_kv_row(Nk)
  second.docs.k_pos = mask.docs.k_pos + attn_second_kv_row(d.Nk);
  cpu::attn_bwd_block_fresh_fp8(q, k, v, dout, lse, delta, dq_acc, dk, dv, mask);
  cpu::attn_bwd_block_fresh_fp8(q, k2, v2, dout, lse, delta, dq_acc, dk2, dv2, second);
}

}  // namespace cpu
}  // namespace rt
