// Whether attn_bwd_work_list (kernels/attn_work_list.h) runs a call, asked before a list is built: the gather
// scheme's one-launch backward (parallel/cp/ring_attention_gather.cpp) runs the list where the answer is yes and falls
// back to attn_bwd_block_fresh_two_kv where it is no; bench_doc_ring_steps --bwd-work-list asks the same.
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {

// A call of q (B,Nq,H,D) in `dtype` on `device`, Hkv K/V heads, k with Nk rows, k2 with Nk2 rows (0: one source) and
// a key list of list_rows rows (attn_work_list_dims). On the CPU every call (the host op takes every call
// attn_bwd_block_fresh_two_kv takes). On CUDA the checks of bwd v5's list mode
// (kernels/cuda/attention/attn_bwd_work_list.cu): compute capability 9.0 with an sm_90a build, bf16, D 64 or 128, at
// least 64 query rows, 128 rows of k and (two sources) 128 of k2 (its TMA boxes), 32-bit row coordinates, and not
// deterministic mode (its dQ adds are unordered); false in a build without CUDA.
bool attn_bwd_work_list_runs(const Device& device, DType dtype, int64_t B, int64_t H, int64_t Hkv, int64_t D,
                             int64_t Nq, int64_t Nk, int64_t Nk2, int64_t list_rows);

}  // namespace rt
