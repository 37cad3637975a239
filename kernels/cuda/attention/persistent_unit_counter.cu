// persistent_unit_counter.h: one int per (kernel, device), allocated and zeroed at first use, kept for the process.
#include "kernels/cuda/attention/persistent_unit_counter.h"

#include <mutex>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {

int* persistent_unit_counter(PersistentKernel kernel, int device, cudaStream_t stream) {
  static std::mutex mutex;
  static int* counters[int(PersistentKernel::count)][kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  int*& c = counters[int(kernel)][device_slot(device)];
  if (c == nullptr) {  // zeroed once; each launch's last fetch leaves it at 0
    CUDA_CHECK(cudaMalloc(&c, sizeof(int)));
    CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(int), stream));
  }
  return c;
}

}  // namespace cuda
}  // namespace rt
