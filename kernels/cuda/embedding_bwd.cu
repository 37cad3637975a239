// embedding_bwd: dtable (V,C) f32 accumulates dout (N,C) rows at tokens (N) i32 (atomic adds; tokens outside
// [0, V) are skipped).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void embedding_bwd_kernel(float* dtable, FloatPtr dout, const int32_t* tokens, int64_t n, int64_t C,
                                     int64_t V) {
  RT_GRID_STRIDE(e, n) {
    const int64_t row = e / C, c = e % C;
    const int64_t tok = tokens[row];
    if (tok >= 0 && tok < V) atomicAdd(dtable + tok * C + c, dout.ld(e));
  }
}

}  // namespace

void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& tokens) {
  const char* op = "embedding_bwd";
  cudaStream_t stream = stream_for(dtable, op);
  RT_CHECK(dtable.ndim == 2, op << ": dtable has shape " << dtable.shape_str() << ", expected (V,C)");
  const int64_t V = dtable.shape[0], C = dtable.shape[1], N = tokens.numel();
  require_dtype_on(dtable, DType::f32, dtable.device, op, "dtable");
  require_dtype_on(tokens, DType::i32, dtable.device, op, "tokens");
  RT_CHECK(dout.numel() == N * C, op << ": dout " << dout.shape_str() << " must be (N,C) = (" << N << "," << C << ")");
  const FloatPtr g = float_arg(dout, dtable.device, op, "dout");
  const int64_t n = N * C;
  if (n == 0) return;
  embedding_bwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(dtable.ptr<float>(), g, tokens.ptr<int32_t>(), n, C, V);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
