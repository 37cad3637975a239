// attn_bwd_delta: delta (B,H,Nq) f32 = rowsum(dout * out) over D; out, dout (B,Nq,H,D). One warp per row.
#include "kernels/cuda/attention/attention_common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void delta_kernel(float* delta, FloatPtr out, FloatPtr dout, int64_t rows, int64_t Nq, int64_t H,
                             int64_t D) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    // r indexes (b, i, h) in out's order; delta is (b, h, i).
    const int64_t h = r % H, i = (r / H) % Nq, b = r / (H * Nq);
    float s = 0.f;
    for (int64_t d = lane; d < D; d += 32) s += out.ld(r * D + d) * dout.ld(r * D + d);
    s = warp_sum(s);
    if (lane == 0) delta[(b * H + h) * Nq + i] = s;
  }
}

}  // namespace

void attn_bwd_delta(const Tensor& out, const Tensor& dout, Tensor delta) {
  const char* op = "attn_bwd_delta";
  cudaStream_t stream = stream_for(out, op);
  RT_CHECK(out.ndim == 4, op << ": out has shape " << out.shape_str() << ", expected (B,Nq,H,D)");
  const int64_t B = out.shape[0], Nq = out.shape[1], H = out.shape[2], D = out.shape[3];
  check_shape(dout, {B, Nq, H, D}, op, "dout (B,Nq,H,D)");
  check_shape(delta, {B, H, Nq}, op, "delta (B,H,Nq)");
  require_dtype_on(delta, DType::f32, out.device, op, "delta");
  const FloatPtr o = float_arg(out, out.device, op, "out"), g = float_arg(dout, out.device, op, "dout");
  const int64_t rows = B * Nq * H;
  if (rows == 0) return;
  delta_kernel<<<grid_for(rows * 32), kThreads, 0, stream>>>(delta.ptr<float>(), o, g, rows, Nq, H, D);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
