// The attention backward ops a RingAttention calls (parallel/cp/ring_attention.h set_fp8_backward): the bf16 / f32 ops
// of kernels/op_list.inc, or with fp8.attention their FP8 forms of kernels/attn_fp8.h (the same contracts, dV, dQ and
// dK on E4M3 operands; on CUDA only a whole sequence per call, as a single-rank ring without documents makes: the ops
// refuse the rest).
#pragma once
#include "kernels/attention.h"
#include "kernels/attn_fp8.h"

namespace rt {

struct AttnBwdOps {
  decltype(&attn_bwd_block) block = &attn_bwd_block;
  decltype(&attn_bwd_block_fresh) fresh = &attn_bwd_block_fresh;
  decltype(&attn_bwd_block_fresh_two_kv) fresh_two_kv = &attn_bwd_block_fresh_two_kv;
  bool fp8 = false;
};

inline AttnBwdOps attn_bwd_ops(bool fp8) {
  if (!fp8) return AttnBwdOps{};
  return AttnBwdOps{&attn_bwd_block_fp8, &attn_bwd_block_fresh_fp8, &attn_bwd_block_fresh_two_kv_fp8, true};
}

}  // namespace rt
