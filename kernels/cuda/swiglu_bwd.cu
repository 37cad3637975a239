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

// 8 columns per thread (swiglu_vec8): c counts 16-byte words of a row of dout, F8 = F / 8. Reads a word's gate, up
// and dout before writing its d gate and d up, as the scalar kernel does per element (d_gate_up may be gate_up).
__global__ void swiglu_bwd_vec8_kernel(uint4* d_gate_up, const uint4* __restrict__ dout, const uint4* gate_up,
                                       int64_t N, int64_t F8) {
  RT_SWIGLU_ROWS_COLS(r, c, N, F8) {
    const int64_t at = r * 2 * F8 + c;  // the gate's word; the up word is F8 further
    float g[8], u[8], d[8], dg[8], du[8];
    bf16x8_to_float(gate_up[at], g);
    bf16x8_to_float(gate_up[at + F8], u);
    bf16x8_to_float(dout[r * F8 + c], d);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float s = 1.f / (1.f + __expf(-g[i]));
      dg[i] = d[i] * u[i] * s * (1.f + g[i] * (1.f - s));
      du[i] = d[i] * g[i] * s;
    }
    d_gate_up[at] = float_to_bf16x8(dg);
    d_gate_up[at + F8] = float_to_bf16x8(du);
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
  if (swiglu_vec8({&d_gate_up, &dout, &gate_up}, F)) {
    swiglu_bwd_vec8_kernel<<<swiglu_grid(N, F / 8), kThreads, 0, stream>>>(
        static_cast<uint4*>(d_gate_up.data), static_cast<const uint4*>(dout.data),
        static_cast<const uint4*>(gate_up.data), N, F / 8);
    CUDA_CHECK_LAUNCH();
    return;
  }
  swiglu_bwd_kernel<<<swiglu_grid(N, F), kThreads, 0, stream>>>(dgu, d, gu, N, F);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
