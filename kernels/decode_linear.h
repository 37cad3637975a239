// A decode step's one-row Linears with the op before each fused in, where the GPU kernel applies
// (kernels/cuda/gemv.cu): w (N,K) the Linear's weight, c (1,N) its output.
//   rmsnorm_linear_row: c = rmsnorm(x (1,K), norm_weight (K), eps) @ w^T, c overwritten;
//   swiglu_linear_row:  c = swiglu(gate_up (1,2K)) @ w^T + beta * c (gate_up: the gate columns, then the up ones).
// Where the fused kernel does not apply (the CPU, f32 activations, unaligned views, RT_GEMV=0 or
// RT_GEMV_FUSED=0) each runs as its two ops, writing the intermediate into ln (1,K) and rstd (1) f32, or g (1,K);
// the fused kernel leaves those unwritten. Both ways give the same bits: the kernel repeats the first op's float
// math and its bf16 rounding.
#pragma once
#include "kernels/tensor.h"

namespace rt {

void rmsnorm_linear_row(Tensor c, const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w, Tensor ln,
                        Tensor rstd);
void swiglu_linear_row(Tensor c, const Tensor& gate_up, const Tensor& w, float beta, Tensor g);

}  // namespace rt
