// gather_rows on one CUDA device: dst row i = src row index[i] (zeros for a negative index, a NaN row for one past
// src: the kernel cannot throw). Rows of one dtype whose bytes are a multiple of 16 (every K/V row at head_dim 64 or
// 128) move as 16-byte vectors; other rows element by element through f32.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/indexed_rows.h"

namespace rt {
namespace cuda {
namespace {

// Rows of V 16-byte vectors; one thread per vector, consecutive threads along a row (coalesced).
__global__ void gather_rows_vec16_kernel(uint4* dst, const uint4* src, const int32_t* index, int64_t rows,
                                         int64_t table_rows, int64_t V) {
  RT_GRID_STRIDE(i, rows * V) {
    const int64_t r = i / V, j = i - r * V;
    const int64_t s = index[r];
    const uint32_t nan2 = 0x7fc07fc0u;  // NaN in both bf16 halves; read as f32 it is a NaN too
    uint4 x = make_uint4(0, 0, 0, 0);
    if (s >= table_rows) x = make_uint4(nan2, nan2, nan2, nan2);
    else if (s >= 0) x = src[s * V + j];
    dst[i] = x;
  }
}

// Any f32 / bf16 pair, element by element through f32.
__global__ void gather_rows_kernel(FloatPtr dst, FloatPtr src, const int32_t* index, int64_t rows, int64_t table_rows,
                                   int64_t W) {
  RT_GRID_STRIDE(i, rows * W) {
    const int64_t r = i / W, j = i - r * W;
    const int64_t s = index[r];
    float x = 0.f;
    if (s >= table_rows) x = __int_as_float(0x7fc00000);
    else if (s >= 0) x = src.ld(s * W + j);
    dst.st(i, x);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// Loads both gather kernels on the current device (lazy loading; kernels/attn_ready_delivery.h): a later first launch
// then needs no load, which could wait for a kernel spinning on the flag this unpack precedes.
void gather_rows_load_kernels() {
  cudaFuncAttributes attributes;
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, gather_rows_vec16_kernel));
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, gather_rows_kernel));
}

void gather_rows(Tensor dst, const Tensor& src, const Tensor& index) {
  const char* op = "gather_rows";
  const IndexedRows g = check_indexed_rows(dst, src, index, /*gather=*/true, op);
  const int64_t n = g.rows * g.width;
  if (n == 0) return;
  cudaStream_t stream = stream_for(dst, op);
  const FloatPtr d = float_arg(dst, dst.device, op, "dst"), s = float_arg(src, dst.device, op, "src");
  const int64_t row_bytes = g.width * int64_t(dtype_size(dst.dtype));
  if (dst.dtype == src.dtype && row_bytes % 16 == 0 && aligned16(dst.data) && aligned16(src.data)) {
    const int64_t V = row_bytes / 16, vectors = g.rows * V;  // (rows, V) uint4
    gather_rows_vec16_kernel<<<grid_for(vectors), kThreads, 0, stream>>>(
        static_cast<uint4*>(dst.data), static_cast<const uint4*>(src.data), index.ptr<int32_t>(), g.rows,
        g.table_rows, V);
  } else {
    gather_rows_kernel<<<grid_for(n), kThreads, 0, stream>>>(d, s, index.ptr<int32_t>(), g.rows, g.table_rows,
                                                             g.width);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
