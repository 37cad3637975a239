// scale_inplace: y *= s (f32 or bf16).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void scale_kernel(FloatPtr y, float s, int64_t n) {
  RT_GRID_STRIDE(i, n) y.st(i, y.ld(i) * s);
}

}  // namespace

void scale_inplace(Tensor y, float s) {
  const char* op = "scale_inplace";
  cudaStream_t stream = stream_for(y, op);
  const int64_t n = y.numel();
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(float_arg(y, y.device, op, "y"), s, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
