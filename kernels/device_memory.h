// Raw device allocation used by the Arena (once, at start-up) and pinned host buffers for staging.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {

void* device_alloc(Device device, size_t bytes);  // cpu: aligned malloc; cuda: cudaMalloc
void device_free(Device device, void* ptr);
bool cuda_available();                            // built with CUDA and at least one device present
int cuda_device_count();
// Memory measured (not planned) on `device`, in bytes. cuda: device memory in use (cudaMemGetInfo total - free:
// every process on that GPU, the CUDA context included; the arena is allocated once, so this is also the peak).
// cpu: this process's peak resident set (VmHWM).
size_t measured_memory_bytes(Device device);
// Host waits for a CUDA device so far (cudaStreamSynchronize / cudaEventSynchronize through
// rt::cuda::host_wait, kernels/cuda/runtime.h), over the process. 0 without CUDA. Tests use it to check
// that a training step does not wait outside its logging point.
uint64_t cuda_host_waits();
// The host's physical memory, and a device's total memory (the host's for the CPU), in bytes.
size_t host_physical_bytes();
size_t device_total_bytes(Device device);

}  // namespace rt
