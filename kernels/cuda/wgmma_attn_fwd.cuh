// attn_fwd_block's Hopper path (fwd v4, kernels/cuda/attn_fwd_wgmma.cu): the parameters it takes and the two
// host entry points the dispatcher in attn_fwd_block.cu uses. Keep C++17.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rt {
namespace cuda {

// Same meaning as the mma.sync kernel's parameters (attn_fwd_block.cu).
struct WgmmaFwdParams {
  const __nv_bfloat16* q;  // (B,Nq,H,D)
  const __nv_bfloat16* k;  // (B,Nk,Hkv,D)
  const __nv_bfloat16* v;  // (B,Nk,Hkv,D)
  float* acc;              // (B,H,Nq,D)
  float* m;                // (B,H,Nq)
  float* l;                // (B,H,Nq)
  int64_t Nq, Nk, H, Hkv, group;
  int64_t q_begin, q_end, k_begin, k_end;
  int64_t diag;  // causal: key j is visible to query i iff j <= i + diag
  bool causal;
  float scale2;  // log2(e) / sqrt(D)
};

// True when `device` can run the wgmma kernel for head dim D: compute capability exactly 9.0, an sm_90a
// image of the kernel in this binary, D in {64, 128}. Cached per device.
bool attn_fwd_wgmma_supported(int device, int64_t D);

// Launches the wgmma kernel (B batches). Call only when attn_fwd_wgmma_supported(device, D).
void launch_attn_fwd_wgmma(const WgmmaFwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
