// cuBLASLt matmuls with a fused epilogue, for the fused ops of kernels/cuda (private to the backend).
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {
namespace cuda {

enum class GemmEpilogue : uint8_t {
  none = 0,
  gelu_aux = 1,  // c = gelu(op(a) @ op(b)), aux = op(a) @ op(b) (the GELU input, kept for the backward)
  dgelu = 2,     // c = (op(a) @ op(b)) * gelu'(aux)  (aux: the GELU input of the forward)
};

// c (M,N) as gemm(c, a, b, trans_a, trans_b, 1, 0) with the epilogue applied; aux (M,N) has c's dtype. Returns
// false, having done nothing, where cuBLASLt offers no algorithm for it (checked once per shape and cached), where
// N % 8 != 0 (the aux leading dimension cuBLASLt requires), or where RT_GEMM_EPILOGUES turns it off (A/B runs): the
// caller then runs the unfused ops.
bool gemm_with_epilogue(Tensor c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, GemmEpilogue epilogue,
                        const Tensor& aux);

// RT_GEMM_EPILOGUES (read once per process): unset or 1 = every epilogue, 0 = none, gelu_aux or dgelu = only that one.
bool gemm_epilogue_enabled(GemmEpilogue epilogue);

}  // namespace cuda
}  // namespace rt
