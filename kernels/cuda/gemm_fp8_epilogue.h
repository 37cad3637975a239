// The FP8 matmul with a fused epilogue, for gemm_fp8_gelu (kernels/cuda/gemm_fp8_gelu.cu); private
// to the backend. Defined in kernels/cuda/gemm_fp8.cu beside gemm_fp8, whose plans it shares.
#pragma once
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/fp8.h"

namespace rt {
namespace cuda {

// c (M,N) = epilogue(dequant(a) (M,K) . dequant(b)^T, aux) as gemm_fp8(c, a, b, 0, fast_accum) with GELU_AUX (aux
// written: the GEMM result; c = its gelu) or DGELU (aux read: the forward's GELU input; c = GEMM * gelu'(aux)); aux
// (M,N) has c's dtype. (cuBLASLt 13.0 offers no AMAX_D with a bf16 D: the caller takes the amax.) Returns false,
// having done nothing, where cuBLASLt has no algorithm for the epilogue (checked once per shape and cached),
// N % 8 != 0, or RT_GEMM_EPILOGUES turns the epilogue off: the caller runs the unfused ops.
bool gemm_fp8_with_epilogue(Tensor c, const Fp8Operand& a, const Fp8Operand& b, bool fast_accum,
                            GemmEpilogue epilogue, const Tensor& aux);

}  // namespace cuda
}  // namespace rt
