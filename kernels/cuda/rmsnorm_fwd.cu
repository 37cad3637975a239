// rmsnorm_fwd: out (N,C) = x * rsqrt(mean(x^2) + eps) * weight; rstd (N) f32 saved for the backward.
// One block per row; the row is read twice (the second read hits L1/L2).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void rmsnorm_fwd_kernel(FloatPtr out, float* rstd, FloatPtr x, FloatPtr weight, int64_t C, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const int64_t base = row * C;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = x.ld(base + c);
    ss += v * v;
  }
  ss = block_sum(ss, shared);
  const float r = rsqrtf(ss / float(C) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out.st(base + c, x.ld(base + c) * r * weight.ld(c));
}

}  // namespace

void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& weight, float eps) {
  const char* op = "rmsnorm_fwd";
  cudaStream_t stream = stream_for(x, op);
  const int64_t C = last_dim(x), N = leading_rows(x);
  check_shape(weight, {C}, op, "weight (C)");
  require_same_numel(out, x, op, "out", "x");
  RT_CHECK(rstd.numel() == N, op << ": rstd " << rstd.shape_str() << " must have one entry per row (" << N << ")");
  require_dtype_on(rstd, DType::f32, x.device, op, "rstd");
  const FloatPtr o = float_arg(out, x.device, op, "out"), xi = float_arg(x, x.device, op, "x"),
                 w = float_arg(weight, x.device, op, "weight");
  if (N == 0) return;
  RT_CHECK(N <= int64_t(0x7fffffff), op << ": " << N << " rows exceed the grid limit; split the call");
  rmsnorm_fwd_kernel<<<unsigned(N), kThreads, 0, stream>>>(o, rstd.ptr<float>(), xi, w, C, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
