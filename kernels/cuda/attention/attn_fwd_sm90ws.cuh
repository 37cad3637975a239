// attn_fwd_block's warp-specialized Hopper path (fwd v5, kernels/cuda/attention/attn_fwd_sm90ws.cu): the two host entry
// points the dispatcher in attn_fwd_dispatch.cu uses. Keep C++17.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {

// True when `device` can run fwd v5 for head dim D: compute capability exactly 9.0, an sm_90a image of the
// kernel in this binary, D in {64, 128}. Cached per device.
bool attn_fwd_ws_supported(int device, int64_t D);

// fwd v5's query rows per CTA (64, 128 or 192) for a call of head dim D, with or without documents, over query
// rows [q_begin, q_end) of B x H heads, on a device of n_sm SMs; forced: AttnVariantOverride::fwd_rows (0: none).
// A pure function of its arguments (launch_attn_fwd_ws passes the device's and the override's).
int fwd_ws_rows_for(int64_t D, bool docs, int64_t q_begin, int64_t q_end, int64_t B, int64_t H, int64_t n_sm,
                    int forced);

// Launches fwd v5 (B batches); blocks with q_end or k_end below 128 run fwd v4. Call only when
// attn_fwd_ws_supported(device, D).
void launch_attn_fwd_ws(const AttnFwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
