// attn_fwd_merge on CUDA: two finalized results of the same rows (over disjoint keys) into the result over both, in
// fp32 with the kernels' natural-log lse: lse' = logaddexp(lse, lse2), out' = out e^(lse - lse') +
// out2 e^(lse2 - lse'). One warp per (b, i, h) row of out2: the lanes take the D columns; lane 0 writes lse.
// A side with lse = -inf saw no key: weight 0, its out not read.
#include "kernels/cuda/attention/attention_common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void attn_fwd_merge_kernel(FloatPtr out, float* lse, FloatPtr out2, const float* lse2, int64_t Nq,
                                      int64_t M, int64_t H, int64_t D, int64_t q_begin, int64_t rows) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const int64_t h = r % H, i = (r / H) % M, b = r / (H * M);  // r: out2's (B, M, H) row order
    const float l2 = lse2[(b * H + h) * M + i];
    if (l2 == -INFINITY) continue;  // result 2 saw no key: the row stays
    const int64_t lrow = (b * H + h) * Nq + q_begin + i;  // (B,H,Nq) index
    const float l1 = lse[lrow];
    const float mx = fmaxf(l1, l2);
    const float w1 = l1 == -INFINITY ? 0.f : expf(l1 - mx), w2 = expf(l2 - mx);
    const float sum = w1 + w2, c1 = w1 / sum, c2 = w2 / sum;
    const int64_t o1 = ((b * Nq + q_begin + i) * H + h) * D, o2 = r * D;  // row starts in out and out2
    for (int64_t e = lane; e < D; e += 32)
      out.st(o1 + e, (c1 == 0.f ? 0.f : out.ld(o1 + e) * c1) + out2.ld(o2 + e) * c2);
    __syncwarp();  // every lane has read lse[lrow]
    if (lane == 0) lse[lrow] = mx + logf(sum);
  }
}

}  // namespace

void attn_fwd_merge(Tensor out, Tensor lse, const Tensor& out2, const Tensor& lse2, int64_t q_begin) {
  const char* op = "attn_fwd_merge";
  cudaStream_t stream = stream_for(out, op);
  const Device& dev = out.device;
  const FloatPtr o = float_arg(out, dev, op, "out");
  const FloatPtr o2 = float_arg(out2, dev, op, "out2");
  require_dtype_on(lse, DType::f32, dev, op, "lse");
  require_dtype_on(lse2, DType::f32, dev, op, "lse2");
  RT_CHECK(out.ndim == 4 && out2.ndim == 4, op << ": out " << out.shape_str() << " and out2 " << out2.shape_str()
                                               << " must be (B,Nq,H,D) and (B,M,H,D)");
  const int64_t B = out.shape[0], Nq = out.shape[1], H = out.shape[2], D = out.shape[3], M = out2.shape[1];
  check_shape(out2, {B, M, H, D}, op, "out2 (B,M,H,D)");
  check_shape(lse, {B, H, Nq}, op, "lse (B,H,Nq)");
  check_shape(lse2, {B, H, M}, op, "lse2 (B,H,M)");
  RT_CHECK(q_begin >= 0 && q_begin + M <= Nq, op << ": rows [" << q_begin << ", " << q_begin + M
                                                 << ") of out2 do not fit the " << Nq << " rows of out");
  const int64_t rows = B * M * H;
  if (rows == 0 || D == 0) return;
  attn_fwd_merge_kernel<<<grid_for(rows * 32), kThreads, 0, stream>>>(o, lse.ptr<float>(), o2, lse2.ptr<float>(), Nq,
                                                                       M, H, D, q_begin, rows);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
