#include "kernels/cuda/check.h"
#include "kernels/device_memory.h"

namespace rt {

void* cuda_alloc(int device, size_t bytes) {
  CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  RT_CHECK(err == cudaSuccess, "cudaMalloc of " << bytes / (1 << 20) << " MiB on cuda:" << device << " failed ("
                                                << cudaGetErrorString(err)
                                                << "). Reduce data.seq_len or train.batch_size, or enable "
                                                   "activation checkpointing (run `ringtrain plan` first)");
  return p;
}

void cuda_free(int device, void* ptr) {
  cudaSetDevice(device);
  cudaFree(ptr);  // not checked: called from destructors during teardown
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

size_t cuda_memory_in_use(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes - free_bytes;
}

size_t cuda_memory_total(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes;
}

}  // namespace rt
