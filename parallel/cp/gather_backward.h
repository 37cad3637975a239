// The gather scheme's own backward call in two parts (DESIGN.md "Document masks"), shared by RingAttention's gather
// mode (parallel/cp/ring_attention_gather.cpp) and its one-GPU benchmark (bench/doc_gather_steps.cuh), so both run the
// same calls.
// Part A is the rank's queries against its own key rows [0, m), run before the gathered call while the K/V exchange
// is in flight; part B against the key rows [m, n), run after the dK/dV return is posted, so the return is in flight
// under it (parallel/schedule/gather_plan.h: choose_own_bwd_split picks m). Run in that order, the two give exactly
// what one
// attn_bwd_block_fresh over every own key gives: dk / dv overwritten with the own call's dK / dV, dq_acc with both
// parts' dQ added (the gathered call between them adds its own).
//   B = 1: each part is attn_bwd_block_fresh on views of its key rows [lo, hi) of k, v, dk, dv (the mask's k_pos
//          moved to row lo): each overwrites exactly its rows, and on an H100/H200 each takes the one-kernel overwrite
//          form (bwd v5) when it has at least 128 key rows.
//   B > 1: a key range of one sample's rows is not contiguous over the samples, so the parts use the mask's key range
//          on the whole tensors: part A = attn_bwd_block_fresh with keys [0, m), which zeroes every row of dk / dv
//          and adds keys [0, m) (kernels/op_list.inc; on CUDA the fill + attn_bwd_block path, attn_bwd_block_fresh.cu),
//          part B = attn_bwd_block with keys [m, n), adding into the rows part A zeroed.
// m = 0 or m = n: part A is the one call over every key (today's call, the fused form where it applies) and part B
// does nothing.
#pragma once
#include "kernels/attention.h"
#include "parallel/cp/attn_bwd_ops.h"

namespace rt {

enum class OwnBwdPart { a, b };

// q, dout (B, n, H, D); k, v (B, n, Hkv, D); lse, delta (B, H, n) f32; dq_acc (B, n, H, D) f32, added to;
// dk, dv (B, n, Hkv, D) f32: part A writes every row (B = 1: rows [0, m)), part B rows [m, n).
// own: the own call's mask for all n rows and keys (document mask, k_pos of key row 0 of sample 0, no q or k range).
// 0 <= m <= n. ops: the backward ops it calls (their FP8 forms with fp8.attention).
void own_bwd_part(OwnBwdPart part, int64_t m, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                  const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk, Tensor dv, const AttnMask& own,
                  const AttnBwdOps& ops = AttnBwdOps{});

}  // namespace rt
