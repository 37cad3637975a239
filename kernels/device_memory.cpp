#include "kernels/device_memory.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace rt {

#ifndef RINGTRAIN_HAVE_CUDA
void* cuda_alloc(int, size_t) {
  RT_CHECK(false, "this ringtrain was built without CUDA; set device: cpu in the config, or rebuild on a "
                  "machine with nvcc (-DRINGTRAIN_CUDA=ON)");
}
void cuda_free(int, void*) {}
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
size_t cuda_memory_in_use(int) { return 0; }
size_t cuda_memory_total(int) { return 0; }
uint64_t cuda_host_waits() { return 0; }
#else
namespace cuda {
uint64_t host_wait_count();  // kernels/cuda/runtime.cu
}
uint64_t cuda_host_waits() { return cuda::host_wait_count(); }
size_t cuda_memory_in_use(int device);  // kernels/cuda/memory.cu
size_t cuda_memory_total(int device);   // kernels/cuda/memory.cu
void* cuda_alloc(int device, size_t bytes);  // kernels/cuda/memory.cu
void cuda_free(int device, void* ptr);
#endif

void* device_alloc(Device device, size_t bytes) {
  if (device.is_cuda()) return cuda_alloc(device.index, bytes);
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  RT_CHECK(p, "out of host memory allocating " << bytes << " bytes");
  return p;
}

void device_free(Device device, void* ptr) {
  if (!ptr) return;
  if (device.is_cuda()) cuda_free(device.index, ptr);
  else std::free(ptr);
}

size_t host_physical_bytes() { return size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGE_SIZE)); }

size_t device_total_bytes(Device device) {
  return device.is_cuda() ? cuda_memory_total(device.index) : host_physical_bytes();
}

size_t measured_memory_bytes(Device device) {
  if (device.is_cuda()) return cuda_memory_in_use(device.index);
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      size_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0;
}

}  // namespace rt
