// fp8_amax on CUDA (kernels/op_list.inc): the amaxes of x (R,K) f32 or bf16 that a quantizer cannot take inside
// its tiles, without a host wait. The outputs are zeroed, then each block folds its tile in with atomicMax on the
// unsigned key of |x| (fp8_common.cuh: integer order = NaN-propagating max).
//   tensor: one key per warp into amax (1).
//   row: tiles of 128 rows x 256 columns; per row a warp reduction (one atomic per row and tile), per column a
//   reduction over the block's 8 warps in shared memory (one atomic per column and tile).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_common.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kRowTileRows = 128, kRowTileCols = 256;  // 8 warps x 16 rows; 32 lanes x 8 columns

template <class T>
__global__ void amax_tensor_kernel(const T* __restrict__ x, int64_t R, int64_t K, bool vec,
                                   uint32_t* __restrict__ amax) {
  // x (R,K); amax (1) as a key. Each thread takes groups of 8 consecutive elements of a row.
  const int64_t groups_per_row = (K + 7) / 8, groups = R * groups_per_row;
  uint32_t key = 0;
  float v[8];
  RT_GRID_STRIDE(g, groups) {
    const int64_t r = g / groups_per_row, c = (g % groups_per_row) * 8;
    load8(x, R, K, r, c, vec, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) key = max(key, amax_key(v[i]));
  }
  key = warp_max_key(key);
  if ((threadIdx.x & 31) == 0 && key != 0) atomicMax(amax, key);
}

template <class T>
__global__ void amax_rows_cols_kernel(const T* __restrict__ x, int64_t R, int64_t K, bool vec,
                                      uint32_t* __restrict__ row_amax, uint32_t* __restrict__ col_amax) {
  // x (R,K); row_amax (R) and col_amax (K) as keys, either null (skipped). Tile (blockIdx.y, blockIdx.x).
  __shared__ uint32_t col_part[8][kRowTileCols];  // per warp, per column of the tile
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r0 = int64_t(blockIdx.y) * kRowTileRows + warp * 16, c0 = int64_t(blockIdx.x) * kRowTileCols;
  const int64_t c = c0 + lane * 8;
  uint32_t col_key[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float v[8];
  for (int i = 0; i < 16; ++i) {
    const int64_t r = r0 + i;
    load8(x, R, K, r, c, vec, v);
    uint32_t row_key = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t k = amax_key(v[j]);
      row_key = max(row_key, k);
      col_key[j] = max(col_key[j], k);
    }
    if (row_amax != nullptr) {
      row_key = warp_max_key(row_key);
      if (lane == 0 && r < R && row_key != 0) atomicMax(row_amax + r, row_key);
    }
  }
  if (col_amax == nullptr) return;
#pragma unroll
  for (int j = 0; j < 8; ++j) col_part[warp][lane * 8 + j] = col_key[j];
  __syncthreads();
  const int col = threadIdx.x;  // blockDim.x == kRowTileCols
  uint32_t key = 0;
#pragma unroll
  for (int w = 0; w < 8; ++w) key = max(key, col_part[w][col]);
  if (c0 + col < K && key != 0) atomicMax(col_amax + c0 + col, key);
}

template <class T>
void launch(const Tensor& x, int64_t R, int64_t K, uint32_t* amax, uint32_t* row_amax, uint32_t* col_amax,
            cudaStream_t stream) {
  const T* xp = static_cast<const T*>(x.data);  // (R,K)
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
  if (amax != nullptr) {
    const int64_t groups = R * ((K + 7) / 8);
    amax_tensor_kernel<T><<<grid_for(groups), kThreads, 0, stream>>>(xp, R, K, vec, amax);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(unsigned((K + kRowTileCols - 1) / kRowTileCols), unsigned((R + kRowTileRows - 1) / kRowTileRows));
  RT_CHECK(grid.y <= 65535u, "fp8_amax: " << R << " rows exceed the grid; split x into row blocks");
  amax_rows_cols_kernel<T><<<grid, kRowTileCols, 0, stream>>>(xp, R, K, vec, row_amax, col_amax);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void fp8_amax(Tensor amax, Tensor amax_t, const Tensor& x, Fp8Scaling scaling) {
  const char* op = "fp8_amax";
  cudaStream_t stream = stream_for(x, op);
  float_arg(x, x.device, op, "x");
  RT_CHECK(x.ndim == 2, op << ": x is " << x.shape_str() << ", expected (R,K)");
  const int64_t R = x.shape[0], K = x.shape[1];
  uint32_t *all = nullptr, *rows = nullptr, *cols = nullptr;
  if (scaling == Fp8Scaling::tensor) {
    RT_CHECK(!amax_t.defined(), op << ": tensor scaling has one amax; pass amax_t undefined");
    require_dtype_on(amax, DType::f32, x.device, op, "amax");
    check_shape(amax, {1}, op, "amax (1)");
    all = static_cast<uint32_t*>(amax.data);
    CUDA_CHECK(cudaMemsetAsync(all, 0, 4, stream));
  } else {
    RT_CHECK(scaling == Fp8Scaling::row, op << ": " << fp8_scaling_name(scaling)
                                            << " scaling takes its amax inside fp8_quantize; call fp8_amax for "
                                               "tensor or row scaling only");
    if (amax.defined()) {
      require_dtype_on(amax, DType::f32, x.device, op, "amax");
      check_shape(amax, {R}, op, "amax (R)");
      rows = static_cast<uint32_t*>(amax.data);
      CUDA_CHECK(cudaMemsetAsync(rows, 0, size_t(R) * 4, stream));
    }
    if (amax_t.defined()) {
      require_dtype_on(amax_t, DType::f32, x.device, op, "amax_t");
      check_shape(amax_t, {K}, op, "amax_t (K)");
      cols = static_cast<uint32_t*>(amax_t.data);
      CUDA_CHECK(cudaMemsetAsync(cols, 0, size_t(K) * 4, stream));
    }
    if (rows == nullptr && cols == nullptr) return;
  }
  if (R == 0 || K == 0) return;
  if (x.dtype == DType::bf16) launch<__nv_bfloat16>(x, R, K, all, rows, cols, stream);
  else launch<float>(x, R, K, all, rows, cols, stream);
}

}  // namespace cuda
}  // namespace rt
