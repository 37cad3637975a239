// copy_cast on one CUDA device: out = in converted elementwise (f32 <-> bf16), or a plain copy when the
// dtypes match (i32 included).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void cast_kernel(FloatPtr out, FloatPtr in, int64_t n) {
  RT_GRID_STRIDE(i, n) out.st(i, in.ld(i));
}

}  // namespace

void copy_cast(Tensor out, const Tensor& in) {
  const char* op = "copy_cast";
  cudaStream_t stream = stream_for(out, op);
  require_same_numel(out, in, op, "out", "in");
  const int64_t n = in.numel();
  if (n == 0) return;
  require_defined(out, op, "out");
  require_defined(in, op, "in");
  RT_CHECK(in.device == out.device, op << ": in on " << in.device.str() << ", out on " << out.device.str());
  if (out.dtype == in.dtype) {
    if (out.data != in.data)
      CUDA_CHECK(cudaMemcpyAsync(out.data, in.data, in.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const FloatPtr o = float_arg(out, out.device, op, "out");
  const FloatPtr i = float_arg(in, out.device, op, "in");
  cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(o, i, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
