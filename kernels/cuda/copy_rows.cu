// copy_rows on one CUDA device: strided rows of src into dst (kernels/strided_rows.h), f32 / bf16 converted
// through f32, overwriting or accumulating. One thread per element; consecutive threads walk a row, so reads and
// writes coalesce along `width` (head_dim or more in the all-to-all exchange).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void copy_rows_kernel(FloatPtr dst, FloatPtr src, StridedRows g, bool accumulate) {
  const int64_t total = g.blocks * g.rows * g.width;
  RT_GRID_STRIDE(i, total) {
    const int64_t j = i % g.width, row = i / g.width;
    const int64_t r = row % g.rows, b = row / g.rows;
    const int64_t d = g.dst_offset + b * g.dst_block_stride + r * g.dst_row_stride + j;
    const int64_t s = g.src_offset + b * g.src_block_stride + r * g.src_row_stride + j;
    const float x = src.ld(s);
    dst.st(d, accumulate ? dst.ld(d) + x : x);
  }
}

}  // namespace

void copy_rows(Tensor dst, const Tensor& src, const StridedRows& g, bool accumulate) {
  const char* op = "copy_rows";
  check_strided_rows(dst, src, g, op);
  const int64_t n = g.elements();
  if (n == 0) return;
  cudaStream_t stream = stream_for(dst, op);
  const FloatPtr d = float_arg(dst, dst.device, op, "dst");
  const FloatPtr s = float_arg(src, dst.device, op, "src");
  copy_rows_kernel<<<grid_for(n), kThreads, 0, stream>>>(d, s, g, accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
