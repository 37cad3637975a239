// scatter_add_rows on one CUDA device: dst (f32) row index[i] += src row i (f32 or bf16), summed in f32. One thread
// per element, consecutive threads along a row; no atomics, so the entries must be distinct (the CPU version refuses
// repeats). A negative index, or one past dst (which the CPU version refuses), adds nothing.
#include "kernels/cuda/common.cuh"
#include "kernels/indexed_rows.h"

namespace rt {
namespace cuda {
namespace {

__global__ void scatter_add_rows_kernel(float* dst, FloatPtr src, const int32_t* index, int64_t rows,
                                        int64_t table_rows, int64_t W) {
  RT_GRID_STRIDE(i, rows * W) {
    const int64_t r = i / W, j = i - r * W;
    const int64_t d = index[r];
    if (d >= 0 && d < table_rows) dst[d * W + j] += src.ld(i);
  }
}

}  // namespace

void scatter_add_rows(Tensor dst, const Tensor& src, const Tensor& index) {
  const char* op = "scatter_add_rows";
  const IndexedRows g = check_indexed_rows(dst, src, index, /*gather=*/false, op);
  const int64_t n = g.rows * g.width;
  if (n == 0) return;
  cudaStream_t stream = stream_for(dst, op);
  const FloatPtr s = float_arg(src, dst.device, op, "src");
  scatter_add_rows_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst.ptr<float>(), s, index.ptr<int32_t>(), g.rows,
                                                                g.table_rows, g.width);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
