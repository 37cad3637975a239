// sum_squares: sum of x^2 accumulated in fp64 on the device.
//   sum_squares(x)                  returns it to the host (a host wait: tests and tools, not the step);
//   sum_squares_accumulate(x, acc)  adds it to a device f32 scalar without waiting (grad clipping).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

// The scratch of sum_squares_accumulate: an fp64 running total and a count of finished blocks, both
// zero between calls (the last block of each call resets them). After sum_squares' slot at offset 0.
constexpr size_t kAccumulateOffset = 64;
struct AccumulateScratch {
  double partial;
  unsigned blocks_done;
};

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

// Every block adds its fp64 partial sum; the last block to finish adds the call's total to acc[0] (f32)
// and clears the scratch for the next call.
__global__ void sum_squares_accumulate_kernel(FloatPtr x, int64_t n, AccumulateScratch* scratch, float* acc) {
  __shared__ double shared[32];
  __shared__ bool last_block;
  double s = 0;
  RT_GRID_STRIDE(i, n) {
    const double v = x.ld(i);
    s += v * v;
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    atomicAdd(&scratch->partial, s);
    __threadfence();
    last_block = atomicAdd(&scratch->blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last_block && threadIdx.x == 0) {
    __threadfence();
    const double total = atomicAdd(&scratch->partial, 0.0);  // every block's add is visible
    acc[0] = float(double(acc[0]) + total);
    scratch->partial = 0;
    scratch->blocks_done = 0;
  }
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
  host_wait(stream, "sum_squares returns its result to the host");
  return result;
}

void sum_squares_accumulate(const Tensor& x, Tensor acc) {
  const char* op = "sum_squares_accumulate";
  cudaStream_t stream = stream_for(x, op);
  require_dtype_on(acc, DType::f32, x.device, op, "acc");
  RT_CHECK(acc.numel() == 1, op << ": acc " << acc.shape_str() << " must be one f32 scalar");
  const int64_t n = x.numel();
  if (n == 0) return;
  auto* scratch = reinterpret_cast<AccumulateScratch*>(static_cast<char*>(device_scratch()) + kAccumulateOffset);
  sum_squares_accumulate_kernel<<<grid_for(n), kThreads, 0, stream>>>(float_arg(x, x.device, op, "x"), n, scratch,
                                                                      acc.ptr<float>());
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
