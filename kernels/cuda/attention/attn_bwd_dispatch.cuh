// The backward's argument checks, parameter set-up, variant choice and launch (kernels/cuda/attention/attn_bwd_dispatch.cu),
// shared by attn_bwd_block and attn_bwd_block_fresh (kernels/cuda/attention/attn_bwd_block_fresh.cu), and the mma.sync
// launcher. Keep C++17.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_shapes.h"
#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {

// Devices, dtypes and shapes of a backward call's tensors; throws naming the bad one.
void check_attn_bwd_args(const AttnDims& d, const Tensor& q, const Tensor& dout, const Tensor& lse,
                         const Tensor& delta, const Tensor& dq_acc, const Tensor& dk_acc, const Tensor& dv_acc,
                         const char* op);

// Sets p's tensor pointers (q / k / v / dout bf16; lse, delta, dq_acc / dk_acc / dv_acc f32) from the call's tensors;
// attn_bwd_params and attn_bwd_work_list (attn_bwd_work_list.cu) share it.
void set_attn_bwd_pointers(AttnBwdParams& p, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                           const Tensor& lse, const Tensor& delta, const Tensor& dq_acc, const Tensor& dk_acc,
                           const Tensor& dv_acc);

// The kernel parameters of one call (adds to dK / dV; the deterministic turn counters are zeroed on `stream`).
AttnBwdParams attn_bwd_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                              const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc,
                              const AttnMask& mask, const AttnDims& d, const AttnRanges& r, cudaStream_t stream);

// The backward kernel for head dim D on `device`: 1 mma.sync, 4 wgmma, 5 warp-specialized wgmma (the defaults and
// the override: attn_bwd_dispatch.cu).
int attn_bwd_variant(int64_t D, int device);

// Launches `variant` (from attn_bwd_variant); v5 runs v4 for blocks it cannot take (attn_bwd_v5_fits). Only v5
// takes p.overwrite_dkv.
void launch_attn_bwd(const AttnBwdParams& p, const AttnDims& d, int variant, int device, cudaStream_t stream);

// Launches mma.sync bwd v1 (attn_bwd_sm80.cu), any architecture, D = 64 or 128; adds to dK / dV only.
void launch_attn_bwd_mma(const AttnBwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
