// FP8 (E4M3) flash-attention backward on Hopper (issue 47): an experiment op, measured for speed and error, not
// called by the model (not in kernels/op_list.inc). It computes what the CPU op attn_bwd_block_fp8 computes
// (kernels/attn_fp8.h: the recipe and its scale groups) for a causal or full mask over one sequence:
//   S = Q K^T and dP = dO V^T from the bf16 operands (f32 accumulation), P = exp(S / sqrt(D) - lse),
//   dS = P (dP - delta) / sqrt(D); then per (128-query, 128-key) tile
//     dV += (f_dO / 448)  sum(e4m3(448 P)^T  dO')      dO' the codes of dO per (128-row block, head)
//     dK += (f_dS f_Q)    sum(e4m3(dS s_dS)^T Q')      s_dS from the amax of the tile's dS
//     dQ += (f_dS f_K)    sum(e4m3(dS s_dS)   K')      K' the codes of K per (128-key block, K/V head)
//   each tile product summed in f32 (the FP8 tensor core), scaled once and added to the f32 accumulators.
//
// Two steps, each its own call so a benchmark can time them apart:
//   1. attn_bwd_fp8_quantize: bf16 q (B,Nq,H,D), k (B,Nk,Hkv,D), dout (B,Nq,H,D) into the transposed E4M3 copies the
//      FP8 wgmma needs (its 8-bit operands must be K-major, i.e. contiguous along the contraction) and f32 factors
//      (kernels/fp8.h's rule: s = fp8_scale_from_amax(amax of the group), code = float_to_e4m3(x * s), factor 1 / s;
//      one group = one 128-row block x D of one head of one sample):
//        qt  (B,H,D,Nq)   e4m3, q_factor  (B,H,Nq/128):   Q^T, the B operand of dK = dS^T Q (over queries);
//        dot (B,H,D,Nq)   e4m3, do_factor (B,H,Nq/128):   dO^T, the B operand of dV = P^T dO;
//        kt  (B,Hkv,D,Nk) e4m3, k_factor  (B,Hkv,Nk/128): K^T, the B operand of dQ = dS K (contracts over keys).
//      qt and dot hold their queries permuted within each group of 16 (column c holds query
//      attn_fp8_vt_key_of_column(c), kernels/attn_fwd_fp8.h), the order in which the kernel's P^T and dS^T register
//      fragments already hold them (the forward's V^T trick); kt keeps the natural key order (dS comes from shared
//      memory, written in that order).
//   2. attn_bwd_fp8_from_codes: the gradients from the bf16 tensors (for S and dP) and the codes (for the three FP8
//      products): attn_bwd_block's contract (kernels/op_list.inc) for this mask: lse and delta (B,H,Nq) f32
//      (natural log; delta = rowsum(dO o O)), dq_acc (B,Nq,H,D), dk_acc and dv_acc (B,Nk,Hkv,D) f32, all three
//      accumulated (+=). The softmax scale is 1 / sqrt(D), as attn_bwd_block's.
// attn_bwd_fp8_experiment runs both with scratch it allocates and frees (a device synchronization).
//
// Scope: CUDA tensors on sm_90a (H100 / H200) only; D = 128; Nq and Nk positive multiples of 128; any B, H, Hkv with
// H % Hkv == 0 (GQA). The mask (the AttnMask overload; the bool overload is the whole sequence, causal or full): full
// or causal with any q_offset / k_offset (key j visible to query i iff k_offset + j <= q_offset + i), and any row
// ranges [q_begin, q_end) x [k_begin, k_end): the ring's block calls. As the CPU op: the Q / dO / K scale groups are
// the 128-row blocks of the tensors as passed (rows outside the ranges count in their block's amax), each dS tile's
// amax is over its pairs inside the ranges and the mask (masked pairs are 0), and dq / dk / dv rows outside the ranges
// keep their values. Documents are refused (attn_bwd_fp8_cuda_supports says why), and so is anything else outside
// this scope, with the reason. The kernel's design and speed: kernels/cuda/attention/attn_bwd_fp8_sm90.cu.
#pragma once
#include <cstdint>

#include <string>

#include "kernels/attention.h"
#include "kernels/tensor.h"

namespace rt {

constexpr int64_t kAttnFp8BwdBlock = 128;  // rows of a scale group, queries and keys of a kernel tile

// The E4M3 operands of attn_bwd_fp8_from_codes (shapes above).
struct AttnFp8BwdCodes {
  Tensor qt, q_factor;    // (B,H,D,Nq) e4m3 (queries permuted per 16), (B,H,Nq/128) f32
  Tensor dot, do_factor;  // (B,H,D,Nq) e4m3 (queries permuted per 16), (B,H,Nq/128) f32
  Tensor kt, k_factor;    // (B,Hkv,D,Nk) e4m3 (natural key order), (B,Hkv,Nk/128) f32
};

// True when the CUDA kernel takes a call with this mask, Nq queries, Nk keys and head dim D (the scope above), else
// false with the reason in *why (when not null), e.g.
// "documents (mask.docs) are not supported by the FP8 attention backward kernel". Dtypes, devices and the other
// shapes are checked by the entry points themselves. Host only: no device is touched.
bool attn_bwd_fp8_cuda_supports(const AttnMask& mask, int64_t Nq, int64_t Nk, int64_t D, std::string* why);

void attn_bwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& dout, const AttnFp8BwdCodes& codes);
void attn_bwd_fp8_from_codes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, const AttnFp8BwdCodes& codes, const AttnMask& mask, Tensor dq_acc,
                             Tensor dk_acc, Tensor dv_acc);
// The whole sequence (Nq == Nk, no ranges or offsets): the AttnMask overload with only mask.causal = causal.
void attn_bwd_fp8_from_codes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, const AttnFp8BwdCodes& codes, bool causal, Tensor dq_acc,
                             Tensor dk_acc, Tensor dv_acc);
void attn_bwd_fp8_experiment(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                             const Tensor& delta, bool causal, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc);

}  // namespace rt
