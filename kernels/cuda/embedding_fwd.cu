// embedding_fwd: out (N,C) = table (V,C)[tokens (N) i32]. A token outside [0, V) yields a NaN row (the
// kernel cannot throw; NaN makes the bad input loud downstream).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void embedding_fwd_kernel(FloatPtr out, const int32_t* tokens, FloatPtr table, int64_t n, int64_t C,
                                     int64_t V) {
  RT_GRID_STRIDE(e, n) {
    const int64_t row = e / C, c = e % C;
    const int64_t tok = tokens[row];
    out.st(e, (tok >= 0 && tok < V) ? table.ld(tok * C + c) : __int_as_float(0x7fc00000));
  }
}

}  // namespace

void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) {
  const char* op = "embedding_fwd";
  cudaStream_t stream = stream_for(table, op);
  RT_CHECK(table.ndim == 2, op << ": table has shape " << table.shape_str() << ", expected (V,C)");
  const int64_t V = table.shape[0], C = table.shape[1], N = tokens.numel();
  require_dtype_on(tokens, DType::i32, table.device, op, "tokens");
  RT_CHECK(out.numel() == N * C, op << ": out " << out.shape_str() << " must be (N,C) = (" << N << "," << C << ")");
  const FloatPtr o = float_arg(out, table.device, op, "out"), t = float_arg(table, table.device, op, "table");
  const int64_t n = N * C;
  if (n == 0) return;
  embedding_fwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(o, tokens.ptr<int32_t>(), t, n, C, V);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
