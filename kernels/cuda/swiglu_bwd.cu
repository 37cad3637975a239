// swiglu_bwd: with s = sigmoid(gate):
//   dgate (N,F) = dout * up * s * (1 + gate * (1 - s)),   dup (N,F) = dout * gate * s   (both overwritten)
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void swiglu_bwd_kernel(FloatPtr dgate, FloatPtr dup, FloatPtr dout, FloatPtr gate, FloatPtr up,
                                  int64_t n) {
  RT_GRID_STRIDE(i, n) {
    const float g = gate.ld(i), u = up.ld(i), d = dout.ld(i);
    const float s = 1.f / (1.f + __expf(-g));
    dgate.st(i, d * u * s * (1.f + g * (1.f - s)));
    dup.st(i, d * g * s);
  }
}

}  // namespace

void swiglu_bwd(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_bwd";
  cudaStream_t stream = stream_for(gate, op);
  require_same_numel(dgate, gate, op, "dgate", "gate");
  require_same_numel(dup, gate, op, "dup", "gate");
  require_same_numel(dout, gate, op, "dout", "gate");
  require_same_numel(up, gate, op, "up", "gate");
  const int64_t n = gate.numel();
  const Device& dev = gate.device;
  const FloatPtr dg = float_arg(dgate, dev, op, "dgate"), du = float_arg(dup, dev, op, "dup"),
                 d = float_arg(dout, dev, op, "dout"), g = float_arg(gate, dev, op, "gate"),
                 u = float_arg(up, dev, op, "up");
  if (n == 0) return;
  swiglu_bwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(dg, du, d, g, u, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
