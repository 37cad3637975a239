// attn_fwd_finalize: out (B,Nq,H,D) = acc / l (0 where l == 0), in out's dtype;
// lse (B,H,Nq) f32 = (m + log2(l)) * ln 2, -inf where l == 0. acc is (B,H,Nq,D).
#include "kernels/cuda/attention_common.cuh"

namespace rt {
namespace cuda {
namespace {

// One thread per element of out; the thread with d == 0 also writes the row's lse.
__global__ void finalize_kernel(FloatPtr out, float* lse, const float* acc, const float* m, const float* l,
                                int64_t n, int64_t Nq, int64_t H, int64_t D) {
  RT_GRID_STRIDE(e, n) {
    const int64_t d = e % D;
    const int64_t h = (e / D) % H;
    const int64_t i = (e / (D * H)) % Nq;
    const int64_t b = e / (D * H * Nq);
    const int64_t row = (b * H + h) * Nq + i;  // (B,H,Nq) index
    const float lr = l[row];
    out.st(e, lr > 0.f ? acc[row * D + d] / lr : 0.f);
    if (d == 0) lse[row] = lr > 0.f ? (m[row] + log2f(lr)) * kLn2 : -INFINITY;
  }
}

}  // namespace

void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse) {
  const char* op = "attn_fwd_finalize";
  cudaStream_t stream = stream_for(out, op);
  RT_CHECK(out.ndim == 4, op << ": out has shape " << out.shape_str() << ", expected (B,Nq,H,D)");
  const int64_t B = out.shape[0], Nq = out.shape[1], H = out.shape[2], D = out.shape[3];
  const Device& dev = out.device;
  require_dtype_on(state.acc, DType::f32, dev, op, "state.acc");
  require_dtype_on(state.m, DType::f32, dev, op, "state.m");
  require_dtype_on(state.l, DType::f32, dev, op, "state.l");
  require_dtype_on(lse, DType::f32, dev, op, "lse");
  check_shape(state.acc, {B, H, Nq, D}, op, "state.acc (B,H,Nq,D)");
  check_shape(state.m, {B, H, Nq}, op, "state.m (B,H,Nq)");
  check_shape(state.l, {B, H, Nq}, op, "state.l (B,H,Nq)");
  check_shape(lse, {B, H, Nq}, op, "lse (B,H,Nq)");
  const FloatPtr o = float_arg(out, dev, op, "out");
  const int64_t n = out.numel();
  if (n == 0) return;
  finalize_kernel<<<grid_for(n), kThreads, 0, stream>>>(o, lse.ptr<float>(), state.acc.ptr<float>(),
                                                        state.m.ptr<float>(), state.l.ptr<float>(), n, Nq, H, D);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
