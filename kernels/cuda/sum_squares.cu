// sum_squares: sum of x^2 accumulated in fp64 on the device, returned to the host (synchronises).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void sum_squares_kernel(FloatPtr x, int64_t n, double* total) {
  __shared__ double shared[32];
  double acc = 0;
  RT_GRID_STRIDE(i, n) {
    const double v = x.ld(i);
    acc += v * v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) atomicAdd(total, acc);
}

}  // namespace

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  cudaStream_t stream = stream_for(x, op);
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  double* total = static_cast<double*>(device_scratch());  // (1)
  CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(double), stream));
  sum_squares_kernel<<<grid_for(n), kThreads, 0, stream>>>(float_arg(x, x.device, op, "x"), n, total);
  CUDA_CHECK_LAUNCH();
  double result = 0;
  CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace cuda
}  // namespace rt
