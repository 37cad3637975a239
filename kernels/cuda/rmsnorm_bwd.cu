// rmsnorm_bwd: with y = x * r * w, r = rsqrt(mean(x^2) + eps):
//   dx (N,C) += r * w * g - x * r^3 * mean(g * w * x)      (accumulates: the residual-stream gradient)
//   dweight (C) f32 += sum over rows of g * x * r
// Each block handles a strided set of rows and keeps its dweight partial in shared memory (C floats), then
// adds it to dweight with one atomic per column. A row's dout and x stay in registers between the dot product and
// the update (rows up to kThreads * kPerThread columns).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kPerThread = 8;  // register-resident columns per thread and row: C <= 2048 at 256 threads

__global__ void rmsnorm_bwd_kernel(FloatPtr dx, float* dweight, FloatPtr dout, FloatPtr x, FloatPtr weight,
                                   const float* rstd, int64_t N, int64_t C) {
  extern __shared__ float dw_partial[];  // (C)
  __shared__ float shared[32];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dw_partial[c] = 0.f;
  const int64_t in_regs = int64_t(kPerThread) * blockDim.x;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const int64_t base = row * C;
    const float r = rstd[row];
    float g_kept[kPerThread], x_kept[kPerThread];  // this thread's columns threadIdx.x + k * blockDim.x
    float dot = 0.f;  // sum_c g * w * x
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
      g_kept[k] = 0.f, x_kept[k] = 0.f;
      if (c < C) {
        g_kept[k] = dout.ld(base + c), x_kept[k] = x.ld(base + c);
        dot += g_kept[k] * weight.ld(c) * x_kept[k];
      }
    }
    for (int64_t c = in_regs + threadIdx.x; c < C; c += blockDim.x)  // wide rows: re-read in the second pass
      dot += dout.ld(base + c) * weight.ld(c) * x.ld(base + c);
    dot = block_sum(dot, shared);
    const float k3 = r * r * r * dot / float(C);
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
      if (c < C) {
        dx.st(base + c, dx.ld(base + c) + r * weight.ld(c) * g_kept[k] - x_kept[k] * k3);
        dw_partial[c] += g_kept[k] * x_kept[k] * r;
      }
    }
    for (int64_t c = in_regs + threadIdx.x; c < C; c += blockDim.x) {
      const float g = dout.ld(base + c), xv = x.ld(base + c);
      dx.st(base + c, dx.ld(base + c) + r * weight.ld(c) * g - xv * k3);
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
  // As many resident blocks as fit (was 2 per SM: too few warps to hide the row loop's latency). Each block adds
  // its dweight partial with C atomics at the end.
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rmsnorm_bwd_kernel, kThreads, smem));
  const int64_t max_blocks = int64_t(device_props().multiProcessorCount) * (per_sm > 0 ? per_sm : 1);
  const unsigned blocks = unsigned(N < max_blocks ? N : max_blocks);
  rmsnorm_bwd_kernel<<<blocks, kThreads, smem, stream>>>(dxp, dweight.ptr<float>(), g, xp, w, rstd.ptr<float>(), N, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
