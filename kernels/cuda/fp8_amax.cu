// fp8_amax on CUDA (kernels/op_list.inc). Placeholder until the kernel lands.
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
void fp8_amax(Tensor, Tensor, const Tensor&, Fp8Scaling) { RT_CHECK(false, "fp8_amax: CUDA not implemented yet"); }
}  // namespace cuda
}  // namespace rt
