// attn_bwd_block's warp-specialized Hopper path (bwd v5, kernels/cuda/attention/attn_bwd_sm90ws.cu): the host entry
// point the dispatcher in attn_bwd_dispatch.cu uses. Keep C++17.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {

// Launches bwd v5 (B batches; p.overwrite_dkv: store dK / dV instead of adding). Call only when
// attn_bwd_wgmma_supported(device, D) and attn_bwd_v5_fits(p.q_end, p.k_end)
// (kernels/cuda/attention/attn_bwd_sm90.cuh).
void launch_attn_bwd_ws(const AttnBwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
