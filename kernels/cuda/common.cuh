// Helpers shared by the simple CUDA ops: argument checks, float access to f32/bf16 tensors, launch sizing
// and block reductions. Keep C++17.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#include "kernels/ops.h"

namespace rt {
namespace cuda {

// A float tensor (f32 or bf16) read and written as float by kernels. The dtype test is warp-uniform.
struct FloatPtr {
  void* p;
  bool bf16;
  __device__ __forceinline__ float ld(int64_t i) const {
    return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
  }
  __device__ __forceinline__ void st(int64_t i, float x) const {
    if (bf16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(x);
    else static_cast<float*>(p)[i] = x;
  }
};

inline void require_defined(const Tensor& t, const char* op, const char* arg) {
  RT_CHECK(t.defined() || t.numel() == 0, op << ": " << arg << " is not defined (null data)");
}

// A CUDA tensor of f32 or bf16 on `device`.
inline FloatPtr float_arg(const Tensor& t, const Device& device, const char* op, const char* arg) {
  require_defined(t, op, arg);
  RT_CHECK(t.device == device, op << ": " << arg << " is on " << t.device.str() << " but the op runs on "
                                  << device.str() << "; copy it there first");
  RT_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16,
           op << ": " << arg << " has dtype " << dtype_name(t.dtype) << ", expected f32 or bf16");
  return FloatPtr{t.data, t.dtype == DType::bf16};
}

inline void require_dtype_on(const Tensor& t, DType dtype, const Device& device, const char* op, const char* arg) {
  require_defined(t, op, arg);
  RT_CHECK(t.device == device, op << ": " << arg << " is on " << t.device.str() << " but the op runs on "
                                  << device.str() << "; copy it there first");
  check_dtype(t, dtype, op, arg);
}

inline void require_same_numel(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  RT_CHECK(a.numel() == b.numel(), op << ": " << an << " " << a.shape_str() << " and " << bn << " "
                                      << b.shape_str() << " must have the same number of elements");
}

inline int64_t last_dim(const Tensor& t) { return t.ndim == 0 ? 1 : t.shape[t.ndim - 1]; }
inline int64_t leading_rows(const Tensor& t) {
  const int64_t c = last_dim(t);
  return c == 0 ? 0 : t.numel() / c;
}

// Grid size for a grid-stride loop over n elements.
constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  const int64_t cap = int64_t(device_props().multiProcessorCount) * 16;
  if (blocks > cap) blocks = cap;
  return unsigned(blocks < 1 ? 1 : blocks);
}

#define RT_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <class T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 values; the call ends with a barrier so `shared` can be reused right away.
template <class T>
__device__ __forceinline__ T block_sum(T x, T* shared) {
  x = warp_sum(x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  T total = lane < nwarps ? shared[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float x, float* shared) {
  x = warp_max(x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float total = lane < nwarps ? shared[lane] : -INFINITY;
  total = warp_max(total);
  __syncthreads();
  return total;
}

}  // namespace cuda
}  // namespace rt
