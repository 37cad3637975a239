// rmsnorm_bwd: with y = x * r * w, r = rsqrt(mean(x^2) + eps):
//   dx (N,C) += r * w * g - x * r^3 * mean(g * w * x)      (accumulates: the residual-stream gradient)
//   dweight (C) f32 += sum over rows of g * x * r
// Each block handles a strided set of rows and keeps its dweight partial in shared memory (C floats), then
// adds it to dweight with one atomic per column.
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void rmsnorm_bwd_kernel(FloatPtr dx, float* dweight, FloatPtr dout, FloatPtr x, FloatPtr weight,
                                   const float* rstd, int64_t N, int64_t C) {
  extern __shared__ float dw_partial[];  // (C)
  __shared__ float shared[32];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dw_partial[c] = 0.f;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const int64_t base = row * C;
    const float r = rstd[row];
    float dot = 0.f;  // sum_c g * w * x
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      dot += dout.ld(base + c) * weight.ld(c) * x.ld(base + c);
    dot = block_sum(dot, shared);
    const float k = r * r * r * dot / float(C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float g = dout.ld(base + c), xv = x.ld(base + c);
      dx.st(base + c, dx.ld(base + c) + r * weight.ld(c) * g - xv * k);
      dw_partial[c] += g * xv * r;
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(dweight + c, dw_partial[c]);
}

}  // namespace

void rmsnorm_bwd(Tensor dx, Tensor dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                 const Tensor& rstd) {
  const char* op = "rmsnorm_bwd";
  cudaStream_t stream = stream_for(x, op);
  const int64_t C = last_dim(x), N = leading_rows(x);
  check_shape(weight, {C}, op, "weight (C)");
  check_shape(dweight, {C}, op, "dweight (C)");
  require_dtype_on(dweight, DType::f32, x.device, op, "dweight");
  require_dtype_on(rstd, DType::f32, x.device, op, "rstd");
  require_same_numel(dx, x, op, "dx", "x");
  require_same_numel(dout, x, op, "dout", "x");
  RT_CHECK(rstd.numel() == N, op << ": rstd " << rstd.shape_str() << " must have one entry per row (" << N << ")");
  const FloatPtr dxp = float_arg(dx, x.device, op, "dx"), g = float_arg(dout, x.device, op, "dout"),
                 xp = float_arg(x, x.device, op, "x"), w = float_arg(weight, x.device, op, "weight");
  if (N == 0 || C == 0) return;
  const size_t smem = size_t(C) * sizeof(float);
  RT_CHECK(smem <= 200 * 1024, op << ": C=" << C << " exceeds the 51200 columns this kernel supports");
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t max_blocks = int64_t(device_props().multiProcessorCount) * 2;
  const unsigned blocks = unsigned(N < max_blocks ? N : max_blocks);
  rmsnorm_bwd_kernel<<<blocks, kThreads, smem, stream>>>(dxp, dweight.ptr<float>(), g, xp, w, rstd.ptr<float>(), N, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
