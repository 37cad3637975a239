// Programmatic dependent launch (PDL, sm_90): a kernel launched with launch_dependent_kernel may be scheduled
// while the kernel before it in the stream is still running; its CTAs take the SMs that the previous kernel's last
// CTAs leave free and wait in grid_dependency_wait until that kernel has completed and its memory is visible. What
// it removes is the launch gap between back-to-back kernels (the ring's cp steps per direction are such a chain).
//
// Contract for a kernel launched this way: no global memory access before grid_dependency_wait. It may call
// allow_dependent_launch once it is past that wait, so that the next such kernel can be scheduled while this one
// runs its last CTAs. Both instructions do nothing when the kernel was launched without the attribute, and on
// devices before sm_90 they are compiled out.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/check.h"

namespace rt {
namespace cuda {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic stream serialization attribute.
template <class... Params, class... Args>
void launch_dependent_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace cuda
}  // namespace rt
