// attn_state_reset: acc (B,H,Nq,D) = 0, m (B,H,Nq) = -inf, l (B,H,Nq) = 0.
#include "kernels/cuda/attention/attention_common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void fill_neg_inf_kernel(float* m, int64_t n) {
  RT_GRID_STRIDE(i, n) m[i] = -INFINITY;
}

}  // namespace

void attn_state_reset(AttnState& state) {
  const char* op = "attn_state_reset";
  cudaStream_t stream = stream_for(state.acc, op);
  const Device& dev = state.acc.device;
  require_dtype_on(state.acc, DType::f32, dev, op, "state.acc");
  require_dtype_on(state.m, DType::f32, dev, op, "state.m");
  require_dtype_on(state.l, DType::f32, dev, op, "state.l");
  RT_CHECK(state.m.numel() == state.l.numel(), op << ": state.m " << state.m.shape_str() << " and state.l "
                                                  << state.l.shape_str() << " differ");
  if (state.acc.numel()) CUDA_CHECK(cudaMemsetAsync(state.acc.data, 0, state.acc.nbytes(), stream));
  if (state.l.numel()) CUDA_CHECK(cudaMemsetAsync(state.l.data, 0, state.l.nbytes(), stream));
  const int64_t n = state.m.numel();
  if (n == 0) return;
  fill_neg_inf_kernel<<<grid_for(n), kThreads, 0, stream>>>(state.m.ptr<float>(), n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
