// bench_doc_ring_steps --scheme gather, the device helpers of its measurement (bench/doc_gather_steps.cuh): gather a
// rank's received K / V rows into one buffer, add gradient rows home, and compare two device arrays (the check
// against the ring's calls; the two one-launch backward forms' bits, bench/doc_gather_bwd_list.cuh).
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "bench/cuda_bench_util.cuh"

namespace rt::bench {

__global__ void gather_rows_kernel(__nv_bfloat16* dst, const __nv_bfloat16* src, const int64_t* src_row,
                                   int64_t rows, int64_t width) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * width;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[src_row[i / width] * width + i % width];
}

// dst row (dst_row ? dst_row[i] : first + i) += src row i, for rows rows of width floats (distinct target rows).
__global__ void add_rows_kernel(float* dst, const float* src, const int64_t* dst_row, int64_t first, int64_t rows,
                                int64_t width) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * width;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / width;
    dst[(dst_row ? dst_row[r] : first + r) * width + i % width] += src[i];
  }
}

__device__ inline float gather_as_float(float x) { return x; }
__device__ inline float gather_as_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// out[0] = max |a - b|, out[1] = max |b| as float bits (non-negative floats order as their bits); out[2] = 1 on NaN.
template <typename T>
__global__ void max_abs_diff_kernel(const T* a, const T* b, int64_t n, unsigned* out) {
  float diff = 0, ref = 0;
  bool nan = false;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = gather_as_float(a[i]), y = gather_as_float(b[i]);
    nan |= isnan(x) || isnan(y);
    diff = fmaxf(diff, fabsf(x - y));
    ref = fmaxf(ref, fabsf(y));
  }
  atomicMax(&out[0], __float_as_uint(diff));
  atomicMax(&out[1], __float_as_uint(ref));
  if (nan) out[2] = 1;
}

// {max |a - b|, max |b|} of two device arrays of n elements; NaN when either holds a NaN.
template <typename T>
std::pair<float, float> gather_max_abs_diff(const void* a, const void* b, int64_t n) {
  DeviceBuffer flags(3 * sizeof(unsigned));  // (3) u32
  cudaStream_t st = cuda::current_stream();
  CUDA_CHECK(cudaMemsetAsync(flags.p, 0, 3 * sizeof(unsigned), st));
  max_abs_diff_kernel<T><<<1024, 256, 0, st>>>(static_cast<const T*>(a), static_cast<const T*>(b), n,
                                               static_cast<unsigned*>(flags.p));
  CUDA_CHECK_LAUNCH();
  unsigned host[3];
  CUDA_CHECK(cudaMemcpyAsync(host, flags.p, sizeof(host), cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  if (host[2]) return {NAN, NAN};
  float d, r;
  std::memcpy(&d, &host[0], 4);
  std::memcpy(&r, &host[1], 4);
  return {d, r};
}

// out[0] += the 32-bit words at which a and b differ, over n words each.
__global__ void word_mismatch_kernel(const uint32_t* a, const uint32_t* b, int64_t n, unsigned long long* out) {
  unsigned long long count = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    count += a[i] != b[i];
  if (count) atomicAdd(out, count);
}

// The f32 elements (32-bit words) whose bits differ between two device arrays of n elements each.
inline int64_t gather_bit_mismatches(const void* a, const void* b, int64_t n) {
  DeviceBuffer count(sizeof(unsigned long long));  // (1) u64
  cudaStream_t st = cuda::current_stream();
  CUDA_CHECK(cudaMemsetAsync(count.p, 0, sizeof(unsigned long long), st));
  word_mismatch_kernel<<<1024, 256, 0, st>>>(static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), n,
                                             static_cast<unsigned long long*>(count.p));
  CUDA_CHECK_LAUNCH();
  unsigned long long host = 0;
  CUDA_CHECK(cudaMemcpyAsync(&host, count.p, sizeof(host), cudaMemcpyDeviceToHost, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  return int64_t(host);
}

}  // namespace rt::bench
