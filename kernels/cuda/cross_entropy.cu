// cross_entropy: logits (n,V), targets (n) i32 (-1 = ignore), losses (n) f32 = -log softmax[target]
// (0 where ignored). When want_grad, logits is overwritten with grad_scale * (softmax - onehot), zero rows
// where ignored. One block per row: max, sum of exp, then loss and gradient. A target outside [-1, V)
// yields a NaN loss.
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void cross_entropy_kernel(FloatPtr logits, const int32_t* targets, float* losses, int64_t V,
                                     float grad_scale, bool want_grad) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const int64_t base = row * V;
  const int32_t target = targets[row];
  if (target == -1) {
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (want_grad)
      for (int64_t c = threadIdx.x; c < V; c += blockDim.x) logits.st(base + c, 0.f);
    return;
  }
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) mx = fmaxf(mx, logits.ld(base + c));
  mx = block_max(mx, shared);
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) sum += __expf(logits.ld(base + c) - mx);
  sum = block_sum(sum, shared);
  const float lse = mx + logf(sum);
  const bool valid = target >= 0 && target < V;
  if (threadIdx.x == 0) losses[row] = valid ? lse - logits.ld(base + target) : __int_as_float(0x7fc00000);
  __syncthreads();  // the target logit is read before it is overwritten
  if (!want_grad) return;
  const float inv = 1.f / sum;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    const float p = __expf(logits.ld(base + c) - mx) * inv;
    logits.st(base + c, grad_scale * (p - (c == target ? 1.f : 0.f)));
  }
}

}  // namespace

void cross_entropy(Tensor logits, const Tensor& targets, Tensor losses, float grad_scale, bool want_grad) {
  const char* op = "cross_entropy";
  cudaStream_t stream = stream_for(logits, op);
  const int64_t V = last_dim(logits), n = leading_rows(logits);
  RT_CHECK(targets.numel() == n, op << ": targets " << targets.shape_str() << " must have one entry per row (" << n << ")");
  RT_CHECK(losses.numel() == n, op << ": losses " << losses.shape_str() << " must have one entry per row (" << n << ")");
  require_dtype_on(targets, DType::i32, logits.device, op, "targets");
  require_dtype_on(losses, DType::f32, logits.device, op, "losses");
  const FloatPtr lg = float_arg(logits, logits.device, op, "logits");
  if (n == 0) return;
  RT_CHECK(n <= int64_t(0x7fffffff), op << ": " << n << " rows exceed the grid limit; split the call");
  cross_entropy_kernel<<<unsigned(n), 512, 0, stream>>>(lg, targets.ptr<int32_t>(), losses.ptr<float>(), V,
                                                        grad_scale, want_grad);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
