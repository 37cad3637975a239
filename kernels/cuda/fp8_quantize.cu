// fp8_quantize on CUDA (kernels/op_list.inc): x (R,K) f32 or bf16 -> q (R,K) and / or qt = x^T (K,R), e4m3, with
// their factors, in one pass over x: amax (of blocks), scale, cast and transpose together. The rounding is
// kernels/fp8.h's, bit for bit (fp8_common.cuh).
// One block per 128x128 tile of x; thread (tx, ty) = (tid % 16, tid / 16) holds the kRows x 8 values rows
// [ty*kRows, ty*kRows+kRows) x columns [tx*8, tx*8+8) of the tile: kRows = 4 (512 threads, about 64 registers: two
// blocks and 32 warps per SM) by default, 8 (256 threads, about 120 registers: 16 warps per SM, the first version)
// through set_fp8_quantize_rows (kernels/cuda/fp8_tuning.h). q rows leave as 8-byte stores (16 threads write a
// row's 128 bytes); qt goes through a transposed tile in shared memory and leaves as 8-byte stores along its rows.
// The staging tile's rows are 128 bytes with their sixteen 8-byte slots swizzled (slot ^ row / 8), so that the
// writes of a warp (16 tile columns 8 apart, two tile rows) and its reads (two rows, 16 slots each) touch every bank
// once per 128 bytes; unswizzled with a 136-byte pitch the 4-byte writes were 8-way bank conflicts.
// Amaxes: block_1x128 takes q's row amax over the tile's 128 columns (a 16-lane reduction) and qt's over the
// tile's 128 rows (a reduction across the block); block_128x128 the tile's; tensor and row read fp8_amax's.
#include <atomic>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/fp8_tuning.h"

namespace rt {
namespace cuda {
namespace {

constexpr int kTile = 128;

// The byte of the qt staging tile's row `row` that holds its logical byte `o`: 8-byte slots swizzled by row / 8.
__device__ __forceinline__ int staged_byte(int row, int o) { return (((o >> 3) ^ (row >> 3)) << 3) | (o & 7); }

struct QuantArgs {
  int64_t R, K;
  uint8_t* q;          // (R,K) e4m3, or null
  float* q_scale;      // fp8_scale_shape(scaling, R, K)
  uint8_t* qt;         // (K,R) e4m3, or null
  float* qt_scale;     // fp8_scale_shape(scaling, K, R)
  const float* amax;   // tensor: (1); row: (R); else null
  const float* amax_t; // row: (K) (qt's rows); else null
  int64_t ld_k, ld_r;  // block_128x128: fp8_block_ld(K), fp8_block_ld(R)
  bool vec_in, vec_q, vec_qt;
};

template <int kS>
constexpr bool is(Fp8Scaling s) { return kS == int(s); }

// kRows E4M3 codes of v[i] * s[i], packed little-endian (kRows 8: a uint2; 4: the low word).
template <int kRows>
__device__ __forceinline__ uint2 pack_codes(const float* v, const float* s) {
  if constexpr (kRows == 8) return e4m3x8_bits(v, s);
  const uint32_t lo = e4m3x2_bits(v[0] * s[0], v[1] * s[1]), hi = e4m3x2_bits(v[2] * s[2], v[3] * s[3]);
  return make_uint2(lo | (hi << 16), 0u);
}

template <class T, int kS, int kRows>
__global__ void __launch_bounds__(16 * kTile / kRows, 2) quantize_kernel(const T* __restrict__ x, QuantArgs a) {
  constexpr int kThreadsQ = 16 * kTile / kRows, kWarps = kThreadsQ / 32;
  __shared__ __align__(16) uint8_t tile_t[kTile][kTile];  // qt staging: (tile column, tile row), slots swizzled
  __shared__ uint32_t col_part[kWarps][kTile];                  // block_1x128: per warp, per tile column
  __shared__ float col_mult[kTile];                             // qt's multiplier per tile column
  __shared__ uint32_t warp_key[kWarps];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4, lane = tid & 31, warp = tid >> 5;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int64_t rb = r0 + ty * kRows, cb = c0 + tx * 8;  // this thread's first row and column
  const int64_t R = a.R, K = a.K;

  float v[kRows][8];  // rows rb.., columns cb..
#pragma unroll
  for (int i = 0; i < kRows; ++i) load8(x, R, K, rb + i, cb, a.vec_in, v[i]);

  // ---- multipliers: row_mult[i] for q's row rb+i, colm[j] for qt's row cb+j ----
  float row_mult[kRows], colm[8];
  if constexpr (is<kS>(Fp8Scaling::tensor) || is<kS>(Fp8Scaling::block_128x128)) {
    float amax;
    if constexpr (is<kS>(Fp8Scaling::tensor)) {
      amax = a.amax[0];
    } else {
      uint32_t key = 0;
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) key = max(key, amax_key(v[i][j]));
      key = warp_max_key(key);
      if (lane == 0) warp_key[warp] = key;
      __syncthreads();
      key = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) key = max(key, warp_key[w]);
      amax = amax_of_key(key);
    }
    const float s = fp8_scale_of(amax), f = fp8_factor_of(s);
#pragma unroll
    for (int i = 0; i < kRows; ++i) row_mult[i] = s;
#pragma unroll
    for (int j = 0; j < 8; ++j) colm[j] = s;
    if (tid == 0) {
      if constexpr (is<kS>(Fp8Scaling::tensor)) {
        if (blockIdx.x == 0 && blockIdx.y == 0) {
          if (a.q) a.q_scale[0] = f;
          if (a.qt) a.qt_scale[0] = f;
        }
      } else {
        if (a.q) {
          a.q_scale[int64_t(blockIdx.y) * a.ld_k + blockIdx.x] = f;
          if (blockIdx.x == gridDim.x - 1)  // the padding columns of this row of blocks
            for (int64_t kb = gridDim.x; kb < a.ld_k; ++kb) a.q_scale[int64_t(blockIdx.y) * a.ld_k + kb] = 1.f;
        }
        if (a.qt) {
          a.qt_scale[int64_t(blockIdx.x) * a.ld_r + blockIdx.y] = f;
          if (blockIdx.y == gridDim.y - 1)
            for (int64_t rbk = gridDim.y; rbk < a.ld_r; ++rbk) a.qt_scale[int64_t(blockIdx.x) * a.ld_r + rbk] = 1.f;
        }
      }
    }
  } else if constexpr (is<kS>(Fp8Scaling::row)) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t r = rb + i;
      row_mult[i] = 1.f;
      if (a.q && r < R) {
        row_mult[i] = fp8_scale_of(a.amax[r]);
        if (blockIdx.x == 0 && tx == 0) a.q_scale[r] = fp8_factor_of(row_mult[i]);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t c = cb + j;
      colm[j] = 1.f;
      if (a.qt && c < K) {
        colm[j] = fp8_scale_of(a.amax_t[c]);
        if (blockIdx.y == 0 && ty == 0) a.qt_scale[c] = fp8_factor_of(colm[j]);
      }
    }
  } else {  // block_1x128
    if (a.q) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        uint32_t key = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) key = max(key, amax_key(v[i][j]));
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, o));  // the row's 16 lanes
        row_mult[i] = fp8_scale_of(amax_of_key(key));
        if (tx == 0 && rb + i < R) a.q_scale[int64_t(blockIdx.x) * R + rb + i] = fp8_factor_of(row_mult[i]);
      }
    }
    if (a.qt) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t key = 0;
#pragma unroll
        for (int i = 0; i < kRows; ++i) key = max(key, amax_key(v[i][j]));
        key = max(key, __shfl_xor_sync(0xFFFFFFFFu, key, 16));  // the warp's other kRows rows
        if (lane < 16) col_part[warp][tx * 8 + j] = key;
      }
      __syncthreads();
      if (tid < kTile) {
        uint32_t key = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) key = max(key, col_part[w][tid]);
        const float s = fp8_scale_of(amax_of_key(key));
        col_mult[tid] = s;
        if (c0 + tid < K) a.qt_scale[int64_t(blockIdx.y) * K + c0 + tid] = fp8_factor_of(s);
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < 8; ++j) colm[j] = col_mult[tx * 8 + j];
    }
  }

  // ---- q: rows rb+i, 8 bytes each ----
  if (a.q) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t r = rb + i;
      if (r >= R) continue;
      const float m[8] = {row_mult[i], row_mult[i], row_mult[i], row_mult[i],
                          row_mult[i], row_mult[i], row_mult[i], row_mult[i]};
      const uint2 bits = e4m3x8_bits(v[i], m);
      if (a.vec_q && cb + 8 <= K) {
        *reinterpret_cast<uint2*>(a.q + r * K + cb) = bits;
      } else {
        const uint64_t w = (uint64_t(bits.y) << 32) | bits.x;
        for (int j = 0; j < 8 && cb + j < K; ++j) a.q[r * K + cb + j] = uint8_t(w >> (8 * j));
      }
    }
  }

  // ---- qt: staged transposed in shared memory, then rows of qt (columns of x) 8 bytes at a time ----
  if (a.qt) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float col[kRows], m[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) col[i] = v[i][j], m[i] = colm[j];
      const uint2 bits = pack_codes<kRows>(col, m);
      const int c = tx * 8 + j;  // the staging row: x's tile column
      if constexpr (kRows == 8) *reinterpret_cast<uint2*>(&tile_t[c][staged_byte(c, ty * 8)]) = bits;
      else *reinterpret_cast<uint32_t*>(&tile_t[c][staged_byte(c, ty * kRows)]) = bits.x;
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kTile * 16 / kThreadsQ; ++t) {  // 2048 chunks of 8 bytes
      const int id = tid + kThreadsQ * t, row = id >> 4, part = id & 15;
      const int64_t k = c0 + row, r = r0 + part * 8;
      if (k >= K || r >= R) continue;
      const uint2 bits = *reinterpret_cast<const uint2*>(&tile_t[row][staged_byte(row, part * 8)]);
      if (a.vec_qt && r + 8 <= R) {
        *reinterpret_cast<uint2*>(a.qt + k * R + r) = bits;
      } else {
        const uint64_t w = (uint64_t(bits.y) << 32) | bits.x;
        for (int e = 0; e < 8 && r + e < R; ++e) a.qt[k * R + r + e] = uint8_t(w >> (8 * e));
      }
    }
  }
}

template <class T, int kRows>
void launch_rows(const T* x, const QuantArgs& a, Fp8Scaling s, const dim3& grid, cudaStream_t stream) {
  constexpr int threads = 16 * kTile / kRows;
  switch (s) {
    case Fp8Scaling::tensor:
      quantize_kernel<T, int(Fp8Scaling::tensor), kRows><<<grid, threads, 0, stream>>>(x, a);
      break;
    case Fp8Scaling::row: quantize_kernel<T, int(Fp8Scaling::row), kRows><<<grid, threads, 0, stream>>>(x, a); break;
    case Fp8Scaling::block_1x128:
      quantize_kernel<T, int(Fp8Scaling::block_1x128), kRows><<<grid, threads, 0, stream>>>(x, a);
      break;
    case Fp8Scaling::block_128x128:
      quantize_kernel<T, int(Fp8Scaling::block_128x128), kRows><<<grid, threads, 0, stream>>>(x, a);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

std::atomic<int> g_rows_per_thread{4};

template <class T>
void launch(const T* x, const QuantArgs& a, Fp8Scaling s, cudaStream_t stream) {
  const dim3 grid(unsigned((a.K + kTile - 1) / kTile), unsigned((a.R + kTile - 1) / kTile));
  RT_CHECK(grid.y <= 65535u, "fp8_quantize: " << a.R << " rows exceed the grid; quantize x in row blocks");
  if (g_rows_per_thread.load(std::memory_order_relaxed) == 8) launch_rows<T, 8>(x, a, s, grid, stream);
  else launch_rows<T, 4>(x, a, s, grid, stream);
}

// The given amax of tensor / row scaling: f32 on `device` with n entries.
const float* amax_arg(const Tensor& t, int64_t n, const Device& device, const char* what) {
  const char* op = "fp8_quantize";
  RT_CHECK(t.defined(), op << ": " << what << " is not given; tensor and row scaling read their amax from "
                           << "fp8_amax (" << n << " f32)");
  require_dtype_on(t, DType::f32, device, op, what);
  RT_CHECK(t.numel() == n, op << ": " << what << " is " << t.shape_str() << ", expected (" << n << ")");
  return static_cast<const float*>(t.data);
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void set_fp8_quantize_rows(int rows) {
  RT_CHECK(rows == 4 || rows == 8, "set_fp8_quantize_rows: " << rows << " rows per thread; 4 or 8");
  g_rows_per_thread.store(rows);
}
int fp8_quantize_rows() { return g_rows_per_thread.load(); }

void fp8_quantize(const Fp8Operand& q, const Fp8Operand& qt, const Tensor& x, const Tensor& amax,
                  const Tensor& amax_t) {
  const char* op = "fp8_quantize";
  cudaStream_t stream = stream_for(x, op);
  float_arg(x, x.device, op, "x");
  RT_CHECK(x.ndim == 2, op << ": x is " << x.shape_str() << ", expected (R,K)");
  RT_CHECK(q.defined() || qt.defined(), op << ": neither q nor qt is defined; nothing to do");
  RT_CHECK(!(q.defined() && qt.defined()) || q.scaling == qt.scaling,
           op << ": q is scaled " << fp8_scaling_name(q.scaling) << " but qt " << fp8_scaling_name(qt.scaling)
              << "; one call quantizes with one scaling");
  const Fp8Scaling s = q.defined() ? q.scaling : qt.scaling;
  QuantArgs a{};
  a.R = x.shape[0], a.K = x.shape[1];
  if (q.defined()) {
    check_fp8_operand(q, a.R, a.K, x.device, op, "q");
    a.q = static_cast<uint8_t*>(q.data.data), a.q_scale = static_cast<float*>(q.scale.data);
  }
  if (qt.defined()) {
    check_fp8_operand(qt, a.K, a.R, x.device, op, "qt");
    a.qt = static_cast<uint8_t*>(qt.data.data), a.qt_scale = static_cast<float*>(qt.scale.data);
  }
  if (s == Fp8Scaling::tensor) {
    a.amax = amax_arg(amax, 1, x.device, "amax");
  } else if (s == Fp8Scaling::row) {
    if (q.defined()) a.amax = amax_arg(amax, a.R, x.device, "amax (R)");
    if (qt.defined()) a.amax_t = amax_arg(amax_t, a.K, x.device, "amax_t (K)");
  } else {
    RT_CHECK(!amax.defined() && !amax_t.defined(),
             op << ": block scalings take their amax in the pass; pass amax and amax_t undefined");
  }
  a.ld_k = fp8_block_ld(a.K), a.ld_r = fp8_block_ld(a.R);
  a.vec_in = a.K % 8 == 0 && aligned(x.data, 16);
  a.vec_q = a.K % 8 == 0 && (a.q == nullptr || aligned(a.q, 8));
  a.vec_qt = a.R % 8 == 0 && (a.qt == nullptr || aligned(a.qt, 8));
  if (a.R == 0 || a.K == 0) return;
  if (x.dtype == DType::bf16) launch(static_cast<const __nv_bfloat16*>(x.data), a, s, stream);
  else launch(static_cast<const float*>(x.data), a, s, stream);
}

}  // namespace cuda
}  // namespace rt
