// Whether attn_fwd_work_list (kernels/attn_work_list.h) runs a call, asked before a list is built: the gather
// scheme's one-launch forward (parallel/cp/ring_attention_gather.cpp) runs the list by default and falls back to
// attn_fwd_whole_two_kv where the answer is no; bench_doc_ring_steps --scheme gather asks the same.
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {

// A call of q (B,Nq,H,D) in `dtype` on `device`, k with Nk rows, k2 with Nk2 rows (0: one source) and a key list of
// list_rows rows (attn_work_list_dims). On the CPU every call (the host op takes every call attn_fwd_whole_two_kv
// takes). On CUDA the checks of fwd v5's list mode (kernels/cuda/attention/attn_fwd_work_list_fits.cu): compute
// capability 9.0 with an sm_90a build, bf16, D 64 or 128, at least 128 query rows, 128 rows of k and (two sources)
// 128 of k2 (its TMA boxes), at most kWorkListTilesMax key tiles, a grid that fits; false in a build without CUDA.
bool attn_fwd_work_list_runs(const Device& device, DType dtype, int64_t B, int64_t H, int64_t D, int64_t Nq,
                             int64_t Nk, int64_t Nk2, int64_t list_rows);

}  // namespace rt
