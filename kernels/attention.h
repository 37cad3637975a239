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
//   documents (AttnDocs below): when docs.q_pos is set, the document mask replaces causal and the offsets:
//   key j is visible to query i of sample b iff q_doc_start[b,i] <= k_pos[b,j] <= q_pos[b,i].
struct AttnDocs {
  // 64-bit global token positions, on the device of q; sample b's row i at q_pos[b * q_stride + i].
  const int64_t* q_pos = nullptr;        // (B, Nq) position of each query row
  const int64_t* q_doc_start = nullptr;  // (B, Nq) position of the first token of that query's document
  const int64_t* k_pos = nullptr;        // (B, Nk) position of each key row
  int64_t q_stride = 0, k_stride = 0;    // elements between samples (>= Nq, >= Nk)
  bool on() const { return q_pos != nullptr; }
};

struct AttnMask {
  bool causal = false;
  int64_t q_offset = 0, k_offset = 0;
  int64_t q_begin = 0, q_end = -1;
  int64_t k_begin = 0, k_end = -1;
  AttnDocs docs;  // off by default: no document mask
};

// fp32 online-softmax state carried across K/V blocks, per (batch, head, query):
//   acc (B,H,Nq,D) f32 un-normalised output; m (B,H,Nq) f32 running max of log2-scaled scores;
//   l (B,H,Nq) f32 running sum of exp2(s - m).
struct AttnState {
  Tensor acc, m, l;
};

// Split-KV decode (attn_decode, attn_decode_partial): the f32 workspace. It holds, first, attn_decode_counter_elems(B,
// H) arrival counters (u32 bits: the CUDA kernel's CTAs count the finished chunks of each head group, and the last
// one merges them), then the per-split partial states (acc (B,H,S,D), m and l (B,H,S)). The counters must be zero
// before a call and every call leaves them zero (the last CTA of a group resets its counter), so zero the
// workspace once when you allocate it (fill(work, 0.f)), and again if you hand it to calls of another B or H. The
// CPU backend refuses a workspace whose counters are not zero (the same contract on every device) and uses nothing
// else of it. Its size is an upper bound that is the same on every device, so a caller sizes it once:
// S = min(ceil(Nk / kDecodeSplitTokens), ceil(kDecodeMaxCtas / (B * Hkv))), at least 1. The CUDA kernel picks its
// split count S' <= S from the device (SMs, occupancy).
constexpr int64_t kDecodeSplitTokens = 64;  // the smallest split: one K/V tile of the CUDA kernel
constexpr int64_t kDecodeMaxCtas = 2048;    // splits x (B x Hkv) never needs more CTAs than this
inline int64_t attn_decode_max_splits(int64_t B, int64_t Hkv, int64_t Nk) {
  const int64_t by_tokens = (Nk + kDecodeSplitTokens - 1) / kDecodeSplitTokens;
  const int64_t pairs = B * Hkv > 0 ? B * Hkv : 1;
  const int64_t by_ctas = (kDecodeMaxCtas + pairs - 1) / pairs;
  const int64_t s = by_tokens < by_ctas ? by_tokens : by_ctas;
  return s > 1 ? s : 1;
}
// The counters at the front of the workspace: one per (sequence, query head), rounded up to 64 (256 bytes) so the
// partial states after them stay aligned.
inline int64_t attn_decode_counter_elems(int64_t B, int64_t H) { return (B * H + 63) / 64 * 64; }
inline int64_t attn_decode_work_elems(int64_t B, int64_t H, int64_t Hkv, int64_t D, int64_t Nk) {
  return attn_decode_counter_elems(B, H) + B * H * attn_decode_max_splits(B, Hkv, Nk) * (D + 2);
}

// attn_fwd_whole_two_kv's and attn_bwd_block_fresh_two_kv's key list: the second source's first row follows the first source's Nk rows at the next
// multiple of kAttnKeySourceAlign (a key tile of the CUDA kernels), so no tile holds keys of both sources.
constexpr int64_t kAttnKeySourceAlign = 128;
inline int64_t attn_second_kv_row(int64_t Nk) {
  return (Nk + kAttnKeySourceAlign - 1) / kAttnKeySourceAlign * kAttnKeySourceAlign;
}

// The attention ops (attn_state_reset, attn_fwd_block, attn_fwd_finalize, attn_fwd_whole, attn_fwd_whole_two_kv,
// attn_fwd_block_first, attn_fwd_block_last, attn_bwd_delta, attn_bwd_block, attn_bwd_block_fresh,
// attn_bwd_block_fresh_two_kv, attn_state_merge, attn_fwd_merge, attn_decode, attn_decode_partial) and their contracts are listed in kernels/op_list.inc.
#define RT_ATTN_OP(ret, name, params, args, first, dispatch) ret name params;
#include "kernels/op_list.inc"

// Deterministic attention backward: the same bits on every run (the CUDA kernel orders its dQ adds instead of
// using float atomics; the CPU backend is deterministic either way). Default: RT_ATTN_DETERMINISTIC=1 in the
// environment, else off; the trainer sets it from train.deterministic_attention.
void set_deterministic_attention(bool on);
bool deterministic_attention();

}  // namespace rt
