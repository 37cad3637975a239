// Shared by swiglu_fwd.cu and swiglu_bwd.cu: the shape check of a SwiGLU call on the fused gate|up layout
// (gate_up (N,2F): per row the gate in columns [0, F), the up projection in [F, 2F)) and the launch grid, rows
// along y and columns along x, so that no thread divides an element index by F.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {

// N and F from out (N,F) (or dout) and gate_up, which must be (N, 2F).
inline void swiglu_shapes(const Tensor& out, const Tensor& gate_up, const char* op, const char* out_name,
                          int64_t& N, int64_t& F) {
  F = last_dim(out), N = leading_rows(out);
  RT_CHECK(last_dim(gate_up) == 2 * F && leading_rows(gate_up) == N,
           op << ": gate_up " << gate_up.shape_str() << " must be (N, 2F) for " << out_name << " "
              << out.shape_str() << " (N, F): the gate columns then the up columns of each row");
}

// x: column blocks of kThreads (capped), y: rows (grid-strided past 65535 or the cap).
inline dim3 swiglu_grid(int64_t N, int64_t F) {
  const int64_t cap = int64_t(device_props().multiProcessorCount) * 16;
  int64_t x = (F + kThreads - 1) / kThreads;
  if (x > cap) x = cap;
  if (x < 1) x = 1;
  int64_t y = cap / x;
  if (y > N) y = N;
  if (y > 65535) y = 65535;
  if (y < 1) y = 1;
  return dim3(unsigned(x), unsigned(y));
}

// The 16-byte path: every tensor bf16, F % 8 == 0 and 16-byte aligned bases (then every row of (N,F) and (N,2F)
// starts 16-byte aligned), one thread per 8 columns. The same float math per element as the scalar kernels, so the
// same bits; the scalar kernels read and write 2 bytes per access (about 1 TB/s on an H200, bench/NOTES.md "SwiGLU").
inline bool swiglu_vec8(std::initializer_list<const Tensor*> ts, int64_t F) {
  if (F % 8 != 0) return false;
  for (const Tensor* t : ts)
    if (t->dtype != DType::bf16 || (reinterpret_cast<uintptr_t>(t->data) & 15u) != 0) return false;
  return true;
}
__device__ __forceinline__ void bf16x8_to_float(const uint4& w, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x, f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ uint4 float_to_bf16x8(const float* f) {
  uint4 w;
  __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(&w);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = __float2bfloat16(f[i]);
  return w;
}

#define RT_SWIGLU_ROWS_COLS(r, c, N, F)                                      \
  for (int64_t r = blockIdx.y; r < (N); r += gridDim.y)                      \
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < (F); \
         c += int64_t(gridDim.x) * blockDim.x)

}  // namespace cuda
}  // namespace rt
