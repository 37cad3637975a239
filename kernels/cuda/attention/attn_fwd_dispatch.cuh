// The forward's variant choice and parameter set-up (kernels/cuda/attention/attn_fwd_dispatch.cu), shared by attn_fwd_block
// and the fused forms (kernels/cuda/attention/attn_fwd_fused.cu), and the mma.sync launcher. Keep C++17.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_shapes.h"
#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {

// The forward kernel for head dim D and q_rows query rows on `device`: 2, 3 mma.sync, 4 wgmma, 5 warp-specialized
// (the defaults and the override: attn_fwd_dispatch.cu).
int attn_fwd_variant(int64_t D, int64_t q_rows, int device);

// The state's checks (f32 acc, m, l on q's device, shaped for q): one message naming `op` and the field.
void check_attn_fwd_state(const AttnDims& d, const Tensor& q, const AttnState& state, const char* op);

// The kernel parameters of one call: q, k, v, the state's pointers, sizes, ranges, mask and scale.
AttnFwdParams attn_fwd_params(const Tensor& q, const Tensor& k, const Tensor& v, const AttnState& state,
                              const AttnMask& mask, const AttnDims& d, const AttnRanges& r);

// Launches mma.sync fwd v2 or v3 (attn_fwd_sm80.cu), any architecture, D = 64 or 128.
void launch_attn_fwd_mma(int variant, const AttnFwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
