// attn_bwd_block's Hopper path (bwd v4, kernels/cuda/attn_bwd_wgmma.cu): the parameters it takes and the two
// host entry points the dispatcher in attn_bwd_block.cu uses. Keep C++17.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rt {
namespace cuda {

// Same meaning as the mma.sync kernel's parameters (attn_bwd_block.cu).
struct WgmmaBwdParams {
  const __nv_bfloat16* q;     // (B,Nq,H,D)
  const __nv_bfloat16* k;     // (B,Nk,Hkv,D)
  const __nv_bfloat16* v;     // (B,Nk,Hkv,D)
  const __nv_bfloat16* dout;  // (B,Nq,H,D)
  const float* lse;           // (B,H,Nq)
  const float* delta;         // (B,H,Nq)
  float* dq;                  // (B,Nq,H,D)
  float* dk;                  // (B,Nk,Hkv,D)
  float* dv;                  // (B,Nk,Hkv,D)
  int* dq_turn;               // (B,H,ceil((q_end-q_begin)/64)) deterministic mode (ordered dQ adds); null: atomics
  int64_t Nq, Nk, H, Hkv, group;
  int64_t q_begin, q_end, k_begin, k_end;
  int64_t diag;  // causal: key j is visible to query i iff j <= i + diag
  bool causal;
  float scale, scale2;  // 1/sqrt(D), log2(e)/sqrt(D)
};

// Query rows per tile and keys per CTA of the wgmma kernel: the same tiles as the mma.sync v1 kernel, so
// the deterministic turn counters (one per 64-row query tile, key tile = blockIdx.x) mean the same thing.
constexpr int kWgBwdRows = 64;
constexpr int kWgBwdKeys = 128;

// True when `device` can run the wgmma backward for head dim D: compute capability exactly 9.0, an sm_90a
// image of the kernel in this binary, D == 64 or 128. Cached per device and D.
bool attn_bwd_wgmma_supported(int device, int64_t D);

// Launches the wgmma backward (B batches). Call only when attn_bwd_wgmma_supported(device, D).
void launch_attn_bwd_wgmma(const WgmmaBwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
