// Per-device CUDA runtime state shared by every op in kernels/cuda/: the current stream, one cuBLASLt
// handle with its workspace, and a small scratch buffer, all created once per device at init.
// Ops call stream_for(tensor), which selects the tensor's device on this thread (initialising it the
// first time) and returns the stream to launch on. Keep this header C++17 (nvcc compiles it).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {
namespace cuda {

// Per-device caches in kernels/cuda (kernel attributes set, counters, SM counts) are arrays of kMaxDevices entries
// indexed by device_slot(device), which refuses an index outside [0, kMaxDevices) instead of mixing devices up.
constexpr int kMaxDevices = 64;
inline int device_slot(int device) {
  RT_CHECK(device >= 0 && device < kMaxDevices,
           "CUDA device " << device << " is past the " << kMaxDevices
                          << " devices the kernels' per-device caches hold; raise rt::cuda::kMaxDevices "
                             "(kernels/cuda/runtime.h)");
  return device;
}

// Selects `device` for the calling thread and creates its handle, workspace and scratch (once).
void init(int device);

// The stream every op of this thread launches on. Default: the legacy default stream (0), which orders
// with every blocking stream; set a non-blocking stream to overlap compute with communication.
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);

// Selects the tensor's device (init on first use) and returns current_stream(). Refuses host tensors.
cudaStream_t stream_for(const Tensor& t, const char* op);

// cuBLASLt handle and workspace of the current device (created by init).
cublasLtHandle_t cublaslt_handle();
void* cublaslt_workspace();
size_t cublaslt_workspace_bytes();

// kScratchBytes of device memory for small reductions (sum_squares), zeroed at init; not safe across
// concurrent streams.
constexpr size_t kScratchBytes = 4096;
void* device_scratch();

// Properties of the current device (cached at init).
const cudaDeviceProp& device_props();

// Every host wait for the GPU in ringtrain goes through these two (kernels/cuda and parallel/comm/cuda), so
// tests can count them (rt::cuda_host_waits(), kernels/device_memory.h): a training step on CUDA waits
// only at its logging point. `why` names the caller; with RINGTRAIN_TRACE_HOST_WAITS=1 each wait is
// printed to stderr with it (to find a stray wait).
void host_wait(cudaStream_t stream, const char* why);      // cudaStreamSynchronize
void host_wait_event(cudaEvent_t event, const char* why);  // cudaEventSynchronize
uint64_t host_wait_count();                                // waits so far, all threads and devices

}  // namespace cuda
}  // namespace rt
