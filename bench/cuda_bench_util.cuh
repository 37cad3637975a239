// Shared by the CUDA kernel benchmarks (bench/attention.cu, bench/ring_steps.cu): random bf16 inputs drawn on
// the device, event timing on the compute stream, and a scoped device allocation.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#include "kernels/device_memory.h"
#include "kernels/tensor.h"

namespace rt::bench {

__global__ void random_bf16_kernel(__nv_bfloat16* x, int64_t n, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t z = (uint64_t(i) + seed * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 31)) * 0x94D049BB133111EBull;
    z ^= z >> 29;
    const float u = float(z >> 40) * (1.f / 16777216.f);
    x[i] = __float2bfloat16((u * 2.f - 1.f) * 1.7f);  // roughly unit variance
  }
}

// Fills a bf16 tensor with hashed uniform values (variance ~1) from `seed`.
inline void random_bf16(const Tensor& t, uint64_t seed) {
  random_bf16_kernel<<<1024, 256, 0, cuda::current_stream()>>>(t.ptr<__nv_bfloat16>(), t.numel(), seed);
  CUDA_CHECK_LAUNCH();
}

// Median milliseconds of fn over reps timed runs after warmup runs (CUDA events on the compute stream). With
// sustain_ms > 0, fn first runs back to back (synchronized each time) for that long, so that the timed runs see
// the clock of sustained load: an H200 at its 700 W cap runs below the clock of a short burst.
inline double time_ms(const std::function<void()>& fn, int warmup, int reps, double sustain_ms = 0.0) {
  for (int i = 0; i < warmup; ++i) fn();
  if (sustain_ms > 0) {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() < sustain_ms) {
      fn();
      CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream()));
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ts;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a, cuda::current_stream()));
    fn();
    CUDA_CHECK(cudaEventRecord(b, cuda::current_stream()));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

struct DeviceBuffer {  // one device allocation on GPU 0, freed on scope exit
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { p = device_alloc(Device::cuda(0), bytes); }
  ~DeviceBuffer() { device_free(Device::cuda(0), p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace rt::bench
