// gelu_fwd: out (N,F) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (tanh approximation)
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void gelu_fwd_kernel(FloatPtr out, FloatPtr x, int64_t n) {
  RT_GRID_STRIDE(i, n) {
    const float v = x.ld(i);
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    out.st(i, 0.5f * v * (1.f + tanhf(u)));
  }
}

}  // namespace

void gelu_fwd(Tensor out, const Tensor& x) {
  const char* op = "gelu_fwd";
  cudaStream_t stream = stream_for(x, op);
  require_same_numel(out, x, op, "out", "x");
  const int64_t n = x.numel();
  const FloatPtr o = float_arg(out, x.device, op, "out"), xp = float_arg(x, x.device, op, "x");
  if (n == 0) return;
  gelu_fwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(o, xp, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
