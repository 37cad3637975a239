#include "parallel/comm/cuda/pinned_host.h"

#include "kernels/cuda_api.h"

namespace rt {

void* pinned_host_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  RT_CHECK(err == cudaSuccess, "cudaHostAlloc of " << bytes / (1 << 20) << " MiB of pinned staging memory failed ("
                                                   << cudaGetErrorString(err)
                                                   << "); fewer ranks per node, or parallel.comm: nccl with one GPU "
                                                      "per rank, need less");
  return p;
}

void pinned_host_free(void* ptr) {
  if (ptr) cudaFreeHost(ptr);
}

}  // namespace rt
