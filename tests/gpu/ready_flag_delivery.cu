// The ready-flag harness of tests/gpu/ready_flag_delivery.h: a one-CTA kernel that delivers gathered rows late and
// raises their flag.
#include "tests/gpu/ready_flag_delivery.h"

#include <chrono>
#include <thread>

#include "kernels/cuda/check.h"

namespace rt::test {
namespace {

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One CTA: thread 0 says it started, waits for go (at most 2 s) and delay_ns; then every thread copies its share of
// the rows; then thread 0 releases the flag.
__global__ void delayed_delivery_kernel(DelayedDelivery d, volatile int* signals) {
  if (threadIdx.x == 0) {
    signals[0] = 1;
    __threadfence_system();
    const unsigned long long t0 = now_ns();
    while (signals[1] == 0 && now_ns() - t0 < 2000000000ull) __nanosleep(1000);
    const unsigned long long t1 = now_ns();
    while (now_ns() - t1 < d.delay_ns) __nanosleep(1000);
  }
  __syncthreads();
  for (int a = 0; a < 2; ++a) {
    const uint4* src = static_cast<const uint4*>(d.src[a]);
    uint4* dst = static_cast<uint4*>(d.dst[a]);
    for (size_t i = threadIdx.x; i < d.bytes[a] / 16; i += blockDim.x) dst[i] = src[i];
  }
  __syncthreads();  // every thread's stores before thread 0's release (cumulative through the barrier)
  if (threadIdx.x == 0) {
    __threadfence();
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(d.ready), "r"(d.epoch) : "memory");
  }
}

}  // namespace

DeliverySignals::DeliverySignals() {
  void* h = nullptr;
  CUDA_CHECK(cudaHostAlloc(&h, 2 * sizeof(int), cudaHostAllocMapped));
  host_ = static_cast<volatile int*>(h);
  host_[0] = host_[1] = 0;
  void* dev = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&dev, h, 0));
  device_ = static_cast<int*>(dev);
}

DeliverySignals::~DeliverySignals() { cudaFreeHost(const_cast<int*>(host_)); }

bool DeliverySignals::launch(const DelayedDelivery& d, cudaStream_t stream) {
  host_[0] = host_[1] = 0;
  delayed_delivery_kernel<<<1, 256, 0, stream>>>(d, device_);
  CUDA_CHECK(cudaGetLastError());
  const auto t0 = std::chrono::steady_clock::now();
  while (host_[0] == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) return false;
    std::this_thread::yield();
  }
  return true;
}

void DeliverySignals::go() { host_[1] = 1; }

}  // namespace rt::test
