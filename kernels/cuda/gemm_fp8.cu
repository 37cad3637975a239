// gemm_fp8 on CUDA (kernels/op_list.inc). Placeholder until the cuBLASLt path lands.
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
void gemm_fp8(Tensor, const Fp8Operand&, const Fp8Operand&, float, bool) {
  RT_CHECK(false, "gemm_fp8: CUDA not implemented yet");
}
}  // namespace cuda
}  // namespace rt
