// fp8_quantize on CUDA (kernels/op_list.inc). Placeholder until the kernel lands.
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
void fp8_quantize(const Fp8Operand&, const Fp8Operand&, const Tensor&, const Tensor&, const Tensor&) {
  RT_CHECK(false, "fp8_quantize: CUDA not implemented yet");
}
}  // namespace cuda
}  // namespace rt
