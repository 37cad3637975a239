// add_rmsnorm_fwd: residual (N,C) += x (N,C); out (N,C) = residual * rsqrt(mean(residual^2) + eps) * weight;
// rstd (N) f32. One block per row. The sum is stored first and the norm is taken of the stored (rounded) values,
// as add_inplace + rmsnorm_fwd would; rows of up to kThreads * kPerThread columns stay in registers between the two
// passes (otherwise the second pass re-reads the row, from L1/L2). Traffic: read residual, x; write residual, out
// (4 row passes instead of the unfused 5).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kPerThread = 16;  // register-resident columns per thread: C <= 4096 at 256 threads

// Stores v at p[i] and returns the value as stored (rounded to bf16 where p is bf16), which is what the norm of the
// unfused path reads back.
__device__ __forceinline__ float stored(FloatPtr p, int64_t i, float v) {
  p.st(i, v);
  return p.bf16 ? __bfloat162float(__float2bfloat16(v)) : v;
}

__global__ void add_rmsnorm_fwd_kernel(FloatPtr residual, FloatPtr x, FloatPtr out, float* rstd, FloatPtr weight,
                                       int64_t C, float eps) {
  __shared__ float shared[32];
  const int64_t base = int64_t(blockIdx.x) * C;
  float kept[kPerThread];  // this thread's columns threadIdx.x + k * blockDim.x of the stored sum (registers)
  const int64_t in_regs = int64_t(kPerThread) * blockDim.x;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    kept[k] = 0.f;
    if (c < C) {
      kept[k] = stored(residual, base + c, residual.ld(base + c) + x.ld(base + c));
      ss += kept[k] * kept[k];
    }
  }
  for (int64_t c = in_regs + threadIdx.x; c < C; c += blockDim.x) {  // wide rows: the rest is re-read below
    const float v = stored(residual, base + c, residual.ld(base + c) + x.ld(base + c));
    ss += v * v;
  }
  ss = block_sum(ss, shared);
  const float r = rsqrtf(ss / float(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    if (c < C) out.st(base + c, kept[k] * r * weight.ld(c));
  }
  for (int64_t c = in_regs + threadIdx.x; c < C; c += blockDim.x)
    out.st(base + c, residual.ld(base + c) * r * weight.ld(c));
}

}  // namespace

void add_rmsnorm_fwd(Tensor residual, const Tensor& x, Tensor out, Tensor rstd, const Tensor& weight, float eps) {
  const char* op = "add_rmsnorm_fwd";
  cudaStream_t stream = stream_for(residual, op);
  const int64_t C = last_dim(residual), N = leading_rows(residual);
  check_shape(weight, {C}, op, "weight (C)");
  require_same_numel(x, residual, op, "x", "residual");
  require_same_numel(out, residual, op, "out", "residual");
  RT_CHECK(rstd.numel() == N, op << ": rstd " << rstd.shape_str() << " must have one entry per row (" << N << ")");
  require_dtype_on(rstd, DType::f32, residual.device, op, "rstd");
  RT_CHECK(out.data != residual.data && out.data != x.data, op << ": out must not alias residual or x");
  const FloatPtr res = float_arg(residual, residual.device, op, "residual"), xi = float_arg(x, residual.device, op, "x"),
                 o = float_arg(out, residual.device, op, "out"), w = float_arg(weight, residual.device, op, "weight");
  if (N == 0) return;
  RT_CHECK(N <= int64_t(0x7fffffff), op << ": " << N << " rows exceed the grid limit; split the call");
  add_rmsnorm_fwd_kernel<<<unsigned(N), kThreads, 0, stream>>>(res, xi, o, rstd.ptr<float>(), w, C, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
