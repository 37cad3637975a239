// swiglu_fwd: out (N,F) = silu(gate) * up, silu(g) = g * sigmoid(g).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void swiglu_fwd_kernel(FloatPtr out, FloatPtr gate, FloatPtr up, int64_t n) {
  RT_GRID_STRIDE(i, n) {
    const float g = gate.ld(i);
    out.st(i, g / (1.f + __expf(-g)) * up.ld(i));
  }
}

}  // namespace

void swiglu_fwd(Tensor out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_fwd";
  cudaStream_t stream = stream_for(gate, op);
  require_same_numel(out, gate, op, "out", "gate");
  require_same_numel(up, gate, op, "up", "gate");
  const int64_t n = gate.numel();
  const FloatPtr o = float_arg(out, gate.device, op, "out"), g = float_arg(gate, gate.device, op, "gate"),
                 u = float_arg(up, gate.device, op, "up");
  if (n == 0) return;
  swiglu_fwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(o, g, u, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
