// add_inplace: y += x, same element count, each f32 or bf16 (sum formed in f32).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void add_kernel(FloatPtr y, FloatPtr x, int64_t n) {
  RT_GRID_STRIDE(i, n) y.st(i, y.ld(i) + x.ld(i));
}

}  // namespace

void add_inplace(Tensor y, const Tensor& x) {
  const char* op = "add_inplace";
  cudaStream_t stream = stream_for(y, op);
  require_same_numel(y, x, op, "y", "x");
  const int64_t n = y.numel();
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(float_arg(y, y.device, op, "y"), float_arg(x, y.device, op, "x"), n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
