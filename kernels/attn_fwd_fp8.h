// FP8 (E4M3) flash-attention forward on Hopper (issue 47): an experiment op, measured for speed and error, not
// called by the model (not in kernels/op_list.inc). The plan is bench/NOTES.md "FP8 attention forward (issue 47): the
// plan for the kernel"; the expected error is NOTES "FP8 attention numerics, emulated" (O 4.4-4.8e-2 relative RMS
// against fp64 on N(0,1) inputs, whatever the scaling).
//
// Two steps, each its own call so a benchmark can time them apart:
//   1. attn_fwd_fp8_quantize: bf16 q (B,N,H,D), k, v (B,N,Hkv,D) into E4M3 codes and f32 factors (kernels/fp8.h's
//      rule: s = fp8_scale_from_amax(amax of the group), code = float_to_e4m3(x * s), factor = 1 / s):
//        q     (B,N,H,D)   e4m3, q_factor (B,H,N/128): one group per 128-row block of one head of one sample;
//        k     (B,N,Hkv,D) e4m3, k_factor (B,Hkv,N/128): likewise per 128-key block;
//        vt    (B,Hkv,D,N) e4m3, v_factor (B,Hkv):       V transposed per head (D rows of N keys), one group per
//              (b, hk) head; within each 16-key group the keys are stored in the order attn_fp8_vt_key_of_column
//              gives (see below);
//        v_block_amax (B,Hkv,N/128) f32: scratch, the amax of each 128-key block of V (the first pass).
//   2. attn_fwd_fp8_from_codes: out (B,N,H,D) bf16 and lse (B,H,N) f32 (natural log: lse = ln sum_j exp(S_ij),
//      the same convention as attn_fwd_whole / attn_fwd_finalize) from the codes, where
//      S = (q code x q factor) . (k code x k factor) x softmax_scale. Per 128-key tile the online softmax in f32
//      (FA2 order, the tile's running max m), P' = 448 exp(S - m) rounded to E4M3 (the probabilities' scale is
//      fp8_scale_from_amax(1) = 448, kAttnFp8PScale), O += P' V in the FP8 tensor core, l += the unrounded 448
//      exp(S - m); at the end O x v_factor / l, lse = m + ln(l / 448).
// attn_fwd_fp8_experiment runs both with scratch it allocates and frees (a device synchronization; a benchmark calls
// the two steps instead).
//
// The V^T key order: the P V product takes P from registers, where a thread's f32 accumulator fragment holds keys
// {2t, 2t+1, 8+2t, 9+2t} of each 16-key group but the E4M3 A fragment wants 4 consecutive keys {4t .. 4t+3} per
// register. Instead of exchanging bytes between the quad's threads, the quantizer stores V^T's keys in the order the
// registers already hold: in each group of 16 keys, column c holds key attn_fp8_vt_key_of_column(c). The product
// is a sum over keys, so it is the same P V, and the kernel packs P without a shuffle.
//
// Scope: CUDA tensors on sm_90a (H100 / H200) only; D = 128; N (= Nq = Nk) a multiple of 128; causal or not;
// any B, H, Hkv with H % Hkv == 0 (GQA). Everything else is refused with the reason.
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {

constexpr int64_t kAttnFp8FwdBlock = 128;  // rows of a Q / K scale group, keys of a kernel tile

// The key (0..15) of a 16-key group that column c (0..15) of a V^T row holds, and its inverse (constexpr: the CUDA
// quantizer calls them too, under --expt-relaxed-constexpr).
constexpr int64_t attn_fp8_vt_key_of_column(int64_t c) {
  const int64_t t = (c % 16) / 4, i = c % 4;
  return (c / 16) * 16 + (i < 2 ? 2 * t + i : 8 + 2 * t + (i - 2));
}
constexpr int64_t attn_fp8_vt_column_of_key(int64_t k) {
  const int64_t j = k % 16, hi = j >= 8 ? 1 : 0, jj = j - 8 * hi;
  return (k / 16) * 16 + 4 * (jj / 2) + 2 * hi + (jj % 2);
}

// The E4M3 operands of attn_fwd_fp8_from_codes (shapes at the top of this file).
struct AttnFp8FwdCodes {
  Tensor q, q_factor;    // (B,N,H,D) e4m3, (B,H,N/128) f32
  Tensor k, k_factor;    // (B,N,Hkv,D) e4m3, (B,Hkv,N/128) f32
  Tensor vt, v_factor;   // (B,Hkv,D,N) e4m3 (keys permuted per 16), (B,Hkv) f32
  Tensor v_block_amax;   // (B,Hkv,N/128) f32 scratch
};

void attn_fwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& v, const AttnFp8FwdCodes& codes);
void attn_fwd_fp8_from_codes(const AttnFp8FwdCodes& codes, bool causal, float softmax_scale, Tensor out, Tensor lse);
void attn_fwd_fp8_experiment(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float softmax_scale,
                             Tensor out, Tensor lse);

}  // namespace rt
