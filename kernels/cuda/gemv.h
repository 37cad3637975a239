// gemm's one-row case (a decode step's GEMMs) without cuBLASLt: kernels/cuda/gemv.cu says when it applies and why.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace rt {
namespace cuda {

// Whether gemv_rows computes this gemm (M, K as check_gemm_args returned them).
bool gemv_applies(const Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, int64_t M, int64_t K);
// c (1,N) = alpha * a (1,K) @ b (N,K)^T + beta * c; the arguments already checked by gemm.
void gemv_rows(Tensor c, const Tensor& a, const Tensor& b, int64_t N, int64_t K, float alpha, float beta,
               cudaStream_t stream);
// kernels/decode_linear.h's fused one-row Linears: run them and return true where the kernel applies (bf16 input
// and weight, c bf16 or f32, K % 8 == 0, 16-byte aligned, RT_GEMV and RT_GEMV_FUSED not 0); false, with nothing
// written, otherwise.
bool rmsnorm_gemv(Tensor c, const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w);
bool swiglu_gemv(Tensor c, const Tensor& gate_up, const Tensor& w, float beta);

}  // namespace cuda
}  // namespace rt
