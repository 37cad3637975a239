// Flash-attention interface (DESIGN.md "Attention interface"). Same signatures on every device.
//   q (B,Nq,H,D), k and v (B,Nk,Hkv,D), out (B,Nq,H,D); query head h reads K/V head h / (H/Hkv).
//   Scale 1/sqrt(D). Scores are prescaled by log2(e) internally and exp2 is used; LSE is natural log.
#pragma once
#include "kernels/tensor.h"

namespace rt {

// Which (query, key) pairs take part in one call.
//   Rows i of q and j of k/v are absolute row indices of the tensors passed.
//   Only query rows in [q_begin, q_end) and key rows in [k_begin, k_end) take part (end = -1: all rows);
//   state / gradient rows outside those ranges are left untouched.
//   causal: key j is visible to query i iff (k_offset + j) <= (q_offset + i). The offsets are the global
//   positions (in whatever unit the layout uses) of row 0 of q and of k.
struct AttnMask {
  bool causal = false;
  int64_t q_offset = 0, k_offset = 0;
  int64_t q_begin = 0, q_end = -1;
  int64_t k_begin = 0, k_end = -1;
};

// fp32 online-softmax state carried across K/V blocks, per (batch, head, query):
//   acc (B,H,Nq,D) f32 un-normalised output; m (B,H,Nq) f32 running max of log2-scaled scores;
//   l (B,H,Nq) f32 running sum of exp2(s - m).
struct AttnState {
  Tensor acc, m, l;
};

// acc = 0, m = -inf, l = 0.
void attn_state_reset(AttnState& state);
// Continues the state with one K/V block.
void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask);
// out (B,Nq,H,D) = acc / l (0 where l == 0); lse (B,H,Nq) f32 = (m + log2(l)) * ln 2, -inf where l == 0.
void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse);
// The whole forward of one K/V block from a fresh state: the same out and lse as attn_state_reset +
// attn_fwd_block + attn_fwd_finalize, which is what it runs where no fused kernel applies. On an H100/H200
// (fwd v5, bf16 out, the mask's query range = all rows) one kernel does it: no state reset, no fp32 state read
// or written, no finalize pass. `scratch` is an AttnState of q's shape; its contents afterwards are unspecified.
void attn_fwd_whole(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& scratch, const AttnMask& mask,
                    Tensor out, Tensor lse);
// delta (B,H,Nq) f32 = rowsum(dout * out), once per layer.
void attn_bwd_delta(const Tensor& out, const Tensor& dout, Tensor delta);
// Recomputes P = exp(S - lse) for one K/V block. dq_acc (B,Nq,H,D), dk_acc and dv_acc (B,Nk,Hkv,D) are
// f32 and accumulate.
void attn_bwd_block(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                    const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc, const AttnMask& mask);
// attn_bwd_block into dk and dv (B,Nk,Hkv,D) f32 that it overwrites with this block's gradients (rows outside the
// key range: zero); dq_acc still accumulates. Same as fill(dk, 0), fill(dv, 0), attn_bwd_block; on an H100/H200
// with the key range = all rows (bwd v5) one kernel does it, storing dK / dV instead of adding them.
void attn_bwd_block_fresh(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                          const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& mask);

// Deterministic attention backward: the same bits on every run (the CUDA kernel orders its dQ adds instead of
// using float atomics; the CPU backend is deterministic either way). Default: RT_ATTN_DETERMINISTIC=1 in the
// environment, else off; the trainer sets it from train.deterministic_attention.
void set_deterministic_attention(bool on);
bool deterministic_attention();

}  // namespace rt
