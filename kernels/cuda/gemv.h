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

}  // namespace cuda
}  // namespace rt
