// swiglu_bwd: d_gate_up (N,2F) overwritten in gate_up's layout (per row: d gate | d up), so that the fused
// [w1; w3] weight takes one gemm for the input gradient and one for the weight gradient. With s = sigmoid(gate):
//   d gate = dout * up * s * (1 + gate * (1 - s)),   d up = dout * gate * s
// Traffic: read dout F and gate_up 2F, write 2F per row.
#include "kernels/cuda/swiglu_common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void swiglu_bwd_kernel(FloatPtr d_gate_up, FloatPtr dout, FloatPtr gate_up, int64_t N, int64_t F) {
  RT_SWIGLU_ROWS_COLS(r, c, N, F) {
    const int64_t at = r * 2 * F + c;  // the gate's column; the up column is F further
    const float g = gate_up.ld(at), u = gate_up.ld(at + F), d = dout.ld(r * F + c);
    const float s = 1.f / (1.f + __expf(-g));
    d_gate_up.st(at, d * u * s * (1.f + g * (1.f - s)));
    d_gate_up.st(at + F, d * g * s);
  }
}

}  // namespace

void swiglu_bwd(Tensor d_gate_up, const Tensor& dout, const Tensor& gate_up) {
  const char* op = "swiglu_bwd";
  cudaStream_t stream = stream_for(gate_up, op);
  int64_t N = 0, F = 0;
  swiglu_shapes(dout, gate_up, op, "dout", N, F);
  require_same_numel(d_gate_up, gate_up, op, "d_gate_up", "gate_up");
  const Device& dev = gate_up.device;
  const FloatPtr dgu = float_arg(d_gate_up, dev, op, "d_gate_up"), d = float_arg(dout, dev, op, "dout"),
                 gu = float_arg(gate_up, dev, op, "gate_up");
  if (N == 0 || F == 0) return;
  swiglu_bwd_kernel<<<swiglu_grid(N, F), kThreads, 0, stream>>>(dgu, d, gu, N, F);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
