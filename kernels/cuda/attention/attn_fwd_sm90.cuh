// attn_fwd_block's Hopper path (fwd v4, kernels/cuda/attention/attn_fwd_sm90.cu): the parameters it takes and the two
// host entry points the dispatcher in attn_fwd_dispatch.cu uses. Keep C++17.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {

// True when `device` can run the wgmma kernel for head dim D: compute capability exactly 9.0, an sm_90a
// image of the kernel in this binary, D in {64, 128}. Cached per device.
bool attn_fwd_wgmma_supported(int device, int64_t D);

// Launches the wgmma kernel (B batches). Call only when attn_fwd_wgmma_supported(device, D).
void launch_attn_fwd_wgmma(const AttnFwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
