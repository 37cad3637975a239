// The per-tile device pieces of the FP8 attention forward (attn_fwd_fp8_sm90.cu): S = Q K^T and O += P V as E4M3
// wgmma on sw128 fp8 tiles (attn_sm90_wgmma_fp8_ops.cuh), the online softmax of one 128-key tile with the operands'
// factors folded into its one FMA, P packed into E4M3 A fragments, and the final store. A consumer warpgroup owns 64
// query rows of the CTA's 128; thread (warp w, lane 4g + t) holds rows 16w + g and 16w + g + 8 of them.
// Accumulator layout (s and o): s[nt*4 + 2r + e] = (row r, column nt*8 + 2t + e), r = 0 (row g) or 1 (row g + 8).
// Keep C++17.
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_fp8_ops.cuh"

namespace rt {
namespace cuda {
namespace fp8fwd {

constexpr int kRows = 128;   // query rows per CTA (2 consumer warpgroups of 64)
constexpr int kKeys = 128;   // keys per tile
constexpr int kD = 128;      // head dim
constexpr float kLog2PScale = 8.807354922057604f;  // log2(448): P' = 448 exp2(x) = exp2(x + log2 448)

// S (64 x 128 per warpgroup) = Q_wg K_tile^T: q_wg is this warpgroup's first row of the (128, 128) Q tile, k_tile a
// (128 keys, 128) tile, both sw128 fp8; 4 k32 steps of 32 bytes.
__device__ __forceinline__ void issue_qk_fp8(float (&s)[64], uint32_t q_wg, uint32_t k_tile) {
  const uint64_t a0 = sw128_desc(opaque_u32(q_wg), 16, 1024), b0 = sw128_desc(k_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kD / 32; ++kk)
    wgmma_m64n128k32_ss_e4m3(s, a0 + uint64_t((kk * 32) >> 4), b0 + uint64_t((kk * 32) >> 4), kk > 0 ? 1 : 0);
}

// O (64 x 128 per warpgroup) += P V_tile: pf holds P as E4M3 A fragments (softmax_tile_fp8), vt_tile is the (128 d,
// 128 keys) sw128 fp8 tile of V^T in the quantizer's key order; 4 k32 steps of 32 keys.
__device__ __forceinline__ void issue_pv_fp8(float (&o)[64], const uint32_t (&pf)[16], uint32_t vt_tile) {
  const uint64_t b0 = sw128_desc(vt_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kKeys / 32; ++kk)
    wgmma_m64n128k32_rs_e4m3(o, pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3],
                             b0 + uint64_t((kk * 32) >> 4));
}

// One tile of the online softmax for this thread's two rows. s holds the raw code products sum(q code x k code);
// c = q_factor x k_factor x softmax_scale x log2(e) turns them into log2-unit scores, so m_run is in log2 units.
// diag: the tile on the causal diagonal (the CTA's rows and the tile's keys start at the same position): key jj is
// visible to CTA-local row lr iff jj <= lr (lrow: this thread's first CTA-local row). Returns alpha (O's rescale),
// updates m_run and l_run (per-thread partial sums of P' = 448 exp2(score - m), unrounded) and writes P' as E4M3
// A fragments: for k32 step kk, pf[4kk + r] = keys {2t, 2t+1, 8+2t, 9+2t} + 32kk of row r and pf[4kk + 2 + r] =
// the same + 16, which the A fragment reads as keys 4t .. 4t+3 (+ 16): the V^T tile holds its keys in that order
// (kernels/attn_fwd_fp8.h, attn_fp8_vt_key_of_column), so no byte leaves its thread.
__device__ __forceinline__ void softmax_tile_fp8(float (&s)[64], uint32_t (&pf)[16], float (&alpha)[2],
                                                 float (&m_run)[2], float (&l_run)[2], float c, bool diag, int lrow,
                                                 int t) {
  if (diag) {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          if (nt * 8 + 2 * t + e > lrow + 8 * r) s[nt * 4 + 2 * r + e] = -INFINITY;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mnew = fmaxf(m_run[r], mx * c);
    const float muse = mnew == -INFINITY ? 0.f : mnew;  // never (-inf) - (-inf)
    alpha[r] = fast_exp2(m_run[r] - muse);
    m_run[r] = mnew;
    const float bias = kLog2PScale - muse;  // P' = exp2(s c - m + log2 448)
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      const float p0 = fast_exp2(fmaf(s[nt * 4 + 2 * r], c, bias));
      const float p1 = fast_exp2(fmaf(s[nt * 4 + 2 * r + 1], c, bias));
      sum += p0 + p1;
      s[nt * 4 + 2 * r] = p0;
      s[nt * 4 + 2 * r + 1] = p1;
    }
    l_run[r] = l_run[r] * alpha[r] + sum;
  }
#pragma unroll
  for (int kk = 0; kk < kKeys / 32; ++kk)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int nt = 4 * kk + 2 * half;  // accumulator column blocks nt (keys 2t, 2t+1) and nt + 1 (8 + 2t, 9 + 2t)
        pf[4 * kk + 2 * half + r] = cvt_e4m3x4(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1], s[(nt + 1) * 4 + 2 * r],
                                               s[(nt + 1) * 4 + 2 * r + 1]);
      }
}

__device__ __forceinline__ void rescale_o_fp8(float (&o)[64], const float (&alpha)[2]) {
#pragma unroll
  for (int nt = 0; nt < kD / 8; ++nt) {
    o[nt * 4 + 0] *= alpha[0];
    o[nt * 4 + 1] *= alpha[0];
    o[nt * 4 + 2] *= alpha[1];
    o[nt * 4 + 3] *= alpha[1];
  }
}

// Sum over the quad's 4 threads (each holds a row's partial l over its own columns).
__device__ __forceinline__ float quad_sum_fp8(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Finalizes this thread's two rows (row0 and row0 + 8 of head h of sample b): out (B,N,H,D) bf16 = O x v_factor /
// l', lse (B,H,N) f32 = (m + log2(l' / 448)) ln 2 (natural log, as attn_fwd_finalize), -inf / 0 where l' == 0.
__device__ __forceinline__ void store_rows_fp8(__nv_bfloat16* out, float* lse, int64_t N, int64_t H, int64_t b,
                                               int64_t h, int64_t row0, int t, float v_factor,
                                               const float (&m_run)[2], const float (&l_run)[2],
                                               const float (&o)[64]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + 8 * r;
    const float lx = quad_sum_fp8(l_run[r]);
    if (t == 0) lse[(b * H + h) * N + row] = lx > 0.f ? (m_run[r] + log2f(lx) - kLog2PScale) * kLn2 : -INFINITY;
    const float inv = lx > 0.f ? v_factor / lx : 0.f;
    __nv_bfloat16* out_row = out + ((b * N + row) * H + h) * kD;  // (D)
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt)
      *reinterpret_cast<uint32_t*>(out_row + nt * 8 + 2 * t) =
          pack_bf16(o[nt * 4 + 2 * r] * inv, o[nt * 4 + 2 * r + 1] * inv);
  }
}

}  // namespace fp8fwd
}  // namespace cuda
}  // namespace rt
