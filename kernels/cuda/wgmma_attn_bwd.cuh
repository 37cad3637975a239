// attn_bwd_block's Hopper path (bwd v4 and v5, kernels/cuda/attn_bwd_wgmma.cu): the parameters it takes and the two
// host entry points the dispatcher in attn_bwd_block.cu uses. Keep C++17.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attn_params.cuh"

namespace rt {
namespace cuda {

// Query rows per tile and keys per CTA of the wgmma kernel: the same tiles as the mma.sync v1 kernel, so
// the deterministic turn counters (one per 64-row query tile, key tile = blockIdx.x) mean the same thing.
constexpr int kWgBwdRows = 64;
constexpr int kWgBwdKeys = 128;

// True when `device` can run the wgmma backward for head dim D: compute capability exactly 9.0, an sm_90a
// image of the kernel in this binary, D == 64 or 128. Cached per device and D.
bool attn_bwd_wgmma_supported(int device, int64_t D);

// True when bwd v5 can take a block whose query rows end at q_end and key rows at k_end: its TMA boxes (64 query
// rows, 128 key rows) must not be longer than the tensor maps' row extents. Smaller blocks run v4, which only
// adds to dK / dV (so attn_bwd_block_fresh asks this before choosing its fused form).
inline bool attn_bwd_v5_fits(int64_t q_end, int64_t k_end) { return q_end >= kWgBwdRows && k_end >= kWgBwdKeys; }

// Launches the wgmma backward (B batches): variant 4 (two math warpgroups, cp.async by all threads, dQ
// atomics) or 5 (warp-specialized: a producer warp, a dQ warp with bulk reduces). Call only when
// attn_bwd_wgmma_supported(device, D).
void launch_attn_bwd_wgmma(const AttnBwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream,
                           int variant);

}  // namespace cuda
}  // namespace rt
