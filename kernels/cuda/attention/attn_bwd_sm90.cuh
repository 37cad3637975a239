// attn_bwd_block's Hopper paths: the tile sizes bwd v4 (kernels/cuda/attention/attn_bwd_sm90.cu) and v5
// (attn_bwd_sm90ws.cu) share, and v4's host entry points for the dispatcher in attn_bwd_dispatch.cu. Keep C++17.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {

// Query rows per tile and keys per CTA of the wgmma kernel: the same tiles as the mma.sync v1 kernel, so
// the deterministic turn counters (one per 64-row query tile, key tile = blockIdx.x) mean the same thing.
constexpr int kWgBwdRows = 64;
constexpr int kWgBwdKeys = 128;

// True when `device` can run the wgmma backward (v4 and v5) for head dim D: compute capability exactly 9.0, an
// sm_90a image of the kernel in this binary, D == 64 or 128. Cached per device and D.
bool attn_bwd_wgmma_supported(int device, int64_t D);

// True when bwd v5 can take a block whose query rows end at q_end and key rows at k_end: its TMA boxes (64 query
// rows, 128 key rows) must not be longer than the tensor maps' row extents. Smaller blocks run v4, which only
// adds to dK / dV (so attn_bwd_block_fresh asks this before choosing its fused form).
inline bool attn_bwd_v5_fits(int64_t q_end, int64_t k_end) { return q_end >= kWgBwdRows && k_end >= kWgBwdKeys; }

// True when bwd v5 can take a call's document mask: always without documents; with them only without the
// deterministic turn counters (a v5 key tile visits only the query tiles that see it; the turns need all of them).
inline bool attn_bwd_v5_takes_docs(bool docs_on, bool deterministic) { return !docs_on || !deterministic; }

// Launches bwd v4 (B batches; two math warpgroups, cp.async by all threads, dQ atomics; adds to dK / dV only).
// Call only when attn_bwd_wgmma_supported(device, D).
void launch_attn_bwd_wgmma(const AttnBwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
