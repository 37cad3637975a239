// fill: y = value for every element (f32, bf16, or i32 with value truncated to an integer).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void fill_float_kernel(FloatPtr y, float value, int64_t n) {
  RT_GRID_STRIDE(i, n) y.st(i, value);
}

__global__ void fill_i32_kernel(int32_t* y, int32_t value, int64_t n) {
  RT_GRID_STRIDE(i, n) y[i] = value;
}

}  // namespace

void fill(Tensor y, float value) {
  const char* op = "fill";
  cudaStream_t stream = stream_for(y, op);
  const int64_t n = y.numel();
  if (n == 0) return;
  if (y.dtype == DType::i32) {
    require_defined(y, op, "y");
    fill_i32_kernel<<<grid_for(n), kThreads, 0, stream>>>(y.ptr<int32_t>(), int32_t(value), n);
  } else {
    fill_float_kernel<<<grid_for(n), kThreads, 0, stream>>>(float_arg(y, y.device, op, "y"), value, n);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
