// attn_state_merge on CUDA: state = merge(state, other) for fp32 online-softmax states (acc (B,H,Nq,D), m and l
// (B,H,Nq), m in the log2 domain). One warp per row: every lane reads the row's m and l before lane 0 rewrites them.
#include "kernels/cuda/attention/attention_common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void attn_state_merge_kernel(float* acc, float* m, float* l, const float* acc_o, const float* m_o,
                                        const float* l_o, int64_t rows, int D) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const float mo = m_o[r];
    if (mo == -INFINITY) continue;  // other saw nothing: the row stays
    const float ms = m[r];
    const float mx = fmaxf(ms, mo);
    const float c = ms == -INFINITY ? 0.f : exp2f(ms - mx), co = exp2f(mo - mx);
    float* a = acc + r * D;          // (D)
    const float* ao = acc_o + r * D;  // (D)
    for (int e = lane; e < D; e += 32) a[e] = (c == 0.f ? 0.f : a[e] * c) + ao[e] * co;
    const float lnew = (ms == -INFINITY ? 0.f : l[r] * c) + l_o[r] * co;
    __syncwarp();  // every lane has read m[r] and l[r]
    if (lane == 0) m[r] = mx, l[r] = lnew;
  }
}

}  // namespace

void attn_state_merge(AttnState& state, const AttnState& other) {
  const char* op = "attn_state_merge";
  cudaStream_t stream = stream_for(state.acc, op);
  const Device& dev = state.acc.device;
  for (const Tensor* t : {&state.acc, &state.m, &state.l}) require_dtype_on(*t, DType::f32, dev, op, "state");
  for (const Tensor* t : {&other.acc, &other.m, &other.l}) require_dtype_on(*t, DType::f32, dev, op, "other");
  RT_CHECK(state.acc.ndim == 4, op << ": state.acc has shape " << state.acc.shape_str() << ", expected (B,H,Nq,D)");
  const int64_t B = state.acc.shape[0], H = state.acc.shape[1], Nq = state.acc.shape[2], D = state.acc.shape[3];
  check_shape(state.m, {B, H, Nq}, op, "state.m (B,H,Nq)");
  check_shape(state.l, {B, H, Nq}, op, "state.l (B,H,Nq)");
  check_shape(other.acc, {B, H, Nq, D}, op, "other.acc (B,H,Nq,D)");
  check_shape(other.m, {B, H, Nq}, op, "other.m (B,H,Nq)");
  check_shape(other.l, {B, H, Nq}, op, "other.l (B,H,Nq)");
  const int64_t rows = B * H * Nq;
  if (rows == 0) return;
  RT_CHECK(D <= 0x7fffffff, op << ": head dim " << D << " is too large");
  attn_state_merge_kernel<<<grid_for(rows * 32), kThreads, 0, stream>>>(
      state.acc.ptr<float>(), state.m.ptr<float>(), state.l.ptr<float>(), other.acc.ptr<float>(), other.m.ptr<float>(),
      other.l.ptr<float>(), rows, int(D));
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
