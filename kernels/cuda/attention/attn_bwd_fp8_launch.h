// The CUDA side of kernels/attn_bwd_fp8.h (the FP8 attention backward experiment, issue 47): the launchers that
// kernels/attn_bwd_fp8.cpp calls once it has checked the tensors. Plain C++ (compiled by the host compiler too).
#pragma once
#include <cstdint>

#include "kernels/attn_bwd_fp8.h"

namespace rt {
namespace cuda {

// The shapes of one call: q, dout (B,Nq,H,D), k, v (B,Nk,Hkv,D); Nq, Nk % 128 == 0, D == 128.
struct AttnFp8BwdDims {
  int64_t B, Nq, Nk, H, Hkv, D;
};

// The mask of one call, resolved (attn_bwd_fp8.cpp checked it: no documents, the ranges inside the rows): query rows
// [q_begin, q_end) x key rows [k_begin, k_end); causal: key j visible to query i iff j <= i + shift, shift =
// q_offset - k_offset.
struct AttnFp8BwdMask {
  bool causal;
  int64_t shift;
  int64_t q_begin, q_end, k_begin, k_end;
};

// attn_bwd_fp8_quantize on the tensors' stream (kernels/cuda/attention/attn_bwd_fp8_quant.cu).
void launch_attn_bwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& dout, const AttnFp8BwdCodes& codes,
                                  const AttnFp8BwdDims& dims);
// The backward kernel (kernels/cuda/attention/attn_bwd_fp8_sm90.cu); refuses a device without sm_90a.
void launch_attn_bwd_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                         const Tensor& delta, const AttnFp8BwdCodes& codes, const AttnFp8BwdDims& dims,
                         const AttnFp8BwdMask& mask, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc);

}  // namespace cuda
}  // namespace rt
