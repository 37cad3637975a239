// The forward's variant choice and parameter set-up (kernels/cuda/attn_fwd_block.cu), shared by attn_fwd_block
// and attn_fwd_whole (kernels/cuda/attn_fwd_whole.cu). Keep C++17.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_shapes.h"
#include "kernels/cuda/attn_params.cuh"

namespace rt {
namespace cuda {

// The forward kernel for head dim D and q_rows query rows on `device`: 1-3 mma.sync, 4 wgmma, 5 warp-specialized
// (RT_ATTN_FWD_VARIANT forces one; see the definition for the defaults).
int attn_fwd_variant(int64_t D, int64_t q_rows, int device);

// The kernel parameters of one call: q, k, v, the state's pointers, sizes, ranges, mask and scale.
AttnFwdParams attn_fwd_params(const Tensor& q, const Tensor& k, const Tensor& v, const AttnState& state,
                              const AttnMask& mask, const AttnDims& d, const AttnRanges& r);

}  // namespace cuda
}  // namespace rt
