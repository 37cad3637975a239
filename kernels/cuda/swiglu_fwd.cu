// swiglu_fwd: out (N,F) = silu(gate) * up, silu(g) = g * sigmoid(g), reading the fused gate|up Linear's output
// gate_up (N,2F) (per row: gate columns, then up columns). Traffic: read 2F, write F per row.
#include "kernels/cuda/swiglu_common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void swiglu_fwd_kernel(FloatPtr out, FloatPtr gate_up, int64_t N, int64_t F) {
  RT_SWIGLU_ROWS_COLS(r, c, N, F) {
    const int64_t in = r * 2 * F + c;  // the gate; the up value is F further
    const float g = gate_up.ld(in);
    out.st(r * F + c, g / (1.f + __expf(-g)) * gate_up.ld(in + F));
  }
}

// 8 columns per thread (swiglu_vec8): c counts 16-byte words of a row of out, F8 = F / 8.
__global__ void swiglu_fwd_vec8_kernel(uint4* __restrict__ out, const uint4* __restrict__ gate_up, int64_t N,
                                       int64_t F8) {
  RT_SWIGLU_ROWS_COLS(r, c, N, F8) {
    float g[8], u[8], o[8];
    bf16x8_to_float(gate_up[r * 2 * F8 + c], g);
    bf16x8_to_float(gate_up[r * 2 * F8 + F8 + c], u);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = g[i] / (1.f + __expf(-g[i])) * u[i];
    out[r * F8 + c] = float_to_bf16x8(o);
  }
}

}  // namespace

void swiglu_fwd(Tensor out, const Tensor& gate_up) {
  const char* op = "swiglu_fwd";
  cudaStream_t stream = stream_for(gate_up, op);
  int64_t N = 0, F = 0;
  swiglu_shapes(out, gate_up, op, "out", N, F);
  const FloatPtr o = float_arg(out, gate_up.device, op, "out"), gu = float_arg(gate_up, gate_up.device, op, "gate_up");
  if (N == 0 || F == 0) return;
  if (swiglu_vec8({&out, &gate_up}, F)) {
    swiglu_fwd_vec8_kernel<<<swiglu_grid(N, F / 8), kThreads, 0, stream>>>(
        static_cast<uint4*>(out.data), static_cast<const uint4*>(gate_up.data), N, F / 8);
    CUDA_CHECK_LAUNCH();
    return;
  }
  swiglu_fwd_kernel<<<swiglu_grid(N, F), kThreads, 0, stream>>>(o, gu, N, F);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
