// The CUDA side of kernels/attn_fwd_fp8.h (the FP8 attention forward experiment, issue 47): the launchers that
// kernels/attn_fwd_fp8.cpp calls once it has checked the tensors. Plain C++ (compiled by the host compiler too).
#pragma once
#include <cstdint>

#include "kernels/attn_fwd_fp8.h"

namespace rt {
namespace cuda {

// The shapes of one call: q (B,N,H,D), k and v (B,N,Hkv,D); N % 128 == 0, D == 128.
struct AttnFp8FwdDims {
  int64_t B, N, H, Hkv, D;
};

// attn_fwd_fp8_quantize's two passes on the tensors' stream (kernels/cuda/attention/attn_fwd_fp8_quant.cu).
void launch_attn_fwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& v, const AttnFp8FwdCodes& codes,
                                  const AttnFp8FwdDims& dims);
// The forward kernel (kernels/cuda/attention/attn_fwd_fp8_sm90.cu); refuses a device without sm_90a.
void launch_attn_fwd_fp8(const AttnFp8FwdCodes& codes, const AttnFp8FwdDims& dims, bool causal, float softmax_scale,
                         Tensor out, Tensor lse);

}  // namespace cuda
}  // namespace rt
