// fp8_amax on CUDA (kernels/op_list.inc): the amaxes of x (R,K) f32 or bf16 that a quantizer cannot take inside
// its tiles, without a host wait. The outputs are zeroed, then each block folds its tile in with atomicMax on the
// unsigned key of |x| (fp8_common.cuh: integer order = NaN-propagating max).
//   tensor: one key per warp into amax (1). A vectorizable x (K % 8 == 0, 16-byte aligned) is read as a flat run
//   of 16-byte words, four loads in flight per thread and no index arithmetic per word (the row / column form did a
//   64-bit division per 8 elements and moved 1.4-2 TB/s); bf16 keys are folded two at a time (__vmaxu2 on the raw
//   bits: |bf16| bits in the same NaN-propagating order as the f32 key).
//   A small x (kSmallElems or fewer, as the guard's record of a step's factors and the rowwise amaxes' fold over
//   ranks): one block that writes the key itself, no memset first (a step takes ~900 amaxes, most of them small, and
//   the memset was a second launch each).
//   row: tiles of 128 rows x 256 columns; per row a warp reduction (one atomic per row and tile), per column a
//   reduction over the block's 8 warps in shared memory (one atomic per column and tile).
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_common.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kRowTileRows = 128, kRowTileCols = 256;  // 8 warps x 16 rows; 32 lanes x 8 columns
constexpr int64_t kSmallElems = 16384;                  // x this small: one block (amax_small_kernel)

template <class T>
__global__ void amax_small_kernel(const T* __restrict__ x, int64_t n, uint32_t* __restrict__ amax) {
  // x: n contiguous elements; amax (1) as a key, written (not folded in: no zeroing first). One block of kThreads.
  __shared__ uint32_t warp_key[kThreads / 32];
  uint32_t key = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) key = max(key, amax_key(float(x[i])));
  key = warp_max_key(key);
  if ((threadIdx.x & 31) == 0) warp_key[threadIdx.x >> 5] = key;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t k = 0;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) k = max(k, warp_key[w]);
    *amax = k;
  }
}

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

// Folds one 16-byte word of x into the running key(s). bf16: k holds two 16-bit keys (|x| bits), f32: one key.
template <class T>
__device__ __forceinline__ void fold_word(uint32_t& k, const uint4& u);
template <>
__device__ __forceinline__ void fold_word<__nv_bfloat16>(uint32_t& k, const uint4& u) {
  k = __vmaxu2(k, u.x & 0x7FFF7FFFu);
  k = __vmaxu2(k, u.y & 0x7FFF7FFFu);
  k = __vmaxu2(k, u.z & 0x7FFF7FFFu);
  k = __vmaxu2(k, u.w & 0x7FFF7FFFu);
}
template <>
__device__ __forceinline__ void fold_word<float>(uint32_t& k, const uint4& u) {
  k = max(k, max(max(u.x & 0x7FFFFFFFu, u.y & 0x7FFFFFFFu), max(u.z & 0x7FFFFFFFu, u.w & 0x7FFFFFFFu)));
}

template <class T>
__global__ void amax_flat_kernel(const uint4* __restrict__ x, int64_t words, uint32_t* __restrict__ amax) {
  // x: `words` 16-byte words (the whole (R,K) tensor, contiguous); amax (1) as a key.
  uint32_t k = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < words; i += 4 * stride) {
    const uint4 a = __ldg(x + i), b = __ldg(x + i + stride), c = __ldg(x + i + 2 * stride),
                d = __ldg(x + i + 3 * stride);
    fold_word<T>(k, a);
    fold_word<T>(k, b);
    fold_word<T>(k, c);
    fold_word<T>(k, d);
  }
  for (; i < words; i += stride) fold_word<T>(k, __ldg(x + i));
  uint32_t key = k;
  if constexpr (sizeof(T) == 2) key = max(k >> 16, k & 0xFFFFu) << 16;  // the bf16 key as the f32 key of |x|
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
  if (amax != nullptr && vec) {
    const int64_t words = R * K * int64_t(sizeof(T)) / 16;  // K % 8 == 0: whole words
    const int64_t cap = int64_t(device_props().multiProcessorCount) * 8;  // 8 blocks of 256 per SM
    const unsigned blocks = unsigned(std::max<int64_t>(1, std::min<int64_t>(cap, (words + kThreads - 1) / kThreads)));
    amax_flat_kernel<T><<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(x.data), words, amax);
    CUDA_CHECK_LAUNCH();
    return;
  }
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
    if (R * K <= kSmallElems) {
      if (x.dtype == DType::bf16) {
        amax_small_kernel<<<1, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x.data), R * K, all);
      } else {
        amax_small_kernel<<<1, kThreads, 0, stream>>>(static_cast<const float*>(x.data), R * K, all);
      }
      CUDA_CHECK_LAUNCH();
      return;
    }
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
