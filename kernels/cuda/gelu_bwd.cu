// gelu_bwd: dx (N,F) = dout * d/dx gelu(x), tanh approximation, overwritten.
//   with u = sqrt(2/pi)(x + 0.044715 x^3), t = tanh(u):
//   d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void gelu_bwd_kernel(FloatPtr dx, FloatPtr dout, FloatPtr x, int64_t n) {
  RT_GRID_STRIDE(i, n) {
    const float v = x.ld(i);
    const float k = 0.7978845608028654f;
    const float t = tanhf(k * (v + 0.044715f * v * v * v));
    const float d = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * v * v);
    dx.st(i, dout.ld(i) * d);
  }
}

}  // namespace

void gelu_bwd(Tensor dx, const Tensor& dout, const Tensor& x) {
  const char* op = "gelu_bwd";
  cudaStream_t stream = stream_for(x, op);
  require_same_numel(dx, x, op, "dx", "x");
  require_same_numel(dout, x, op, "dout", "x");
  const int64_t n = x.numel();
  const FloatPtr d = float_arg(dx, x.device, op, "dx"), g = float_arg(dout, x.device, op, "dout"),
                 xp = float_arg(x, x.device, op, "x");
  if (n == 0) return;
  gelu_bwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(d, g, xp, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
