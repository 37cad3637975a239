// The FP8 matmul with a fused epilogue, for gemm_fp8_gelu / gemm_fp8_dgelu (kernels/cuda/gemm_fp8_gelu.cu); private
// to the backend. Defined in kernels/cuda/gemm_fp8.cu beside gemm_fp8, whose plans it shares.
#pragma once
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/fp8.h"

namespace rt {
namespace cuda {

// c (M,N) = epilogue(dequant(a) (M,K) . dequant(b)^T, aux) as gemm_fp8(c, a, b, 0, fast_accum) with GELU_AUX (aux
// written: the GEMM result; c = its gelu) or DGELU (aux read: the forward's GELU input; c = GEMM * gelu'(aux)); aux
// (M,N) has c's dtype. amax (device, 1 f32) or null: where cuBLASLt offers the amax of D with this epilogue, it is
// written there and amax_taken is set; otherwise the caller takes it. Returns false, having done nothing, where
// cuBLASLt has no algorithm for the epilogue (checked once per shape and cached), N % 8 != 0, or RT_GEMM_EPILOGUES
// turns the epilogue off: the caller runs the unfused ops.
bool gemm_fp8_with_epilogue(Tensor c, const Fp8Operand& a, const Fp8Operand& b, bool fast_accum,
                            GemmEpilogue epilogue, const Tensor& aux, float* amax, bool& amax_taken);

}  // namespace cuda
}  // namespace rt
