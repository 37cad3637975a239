// Per-device runtime state (see runtime.h). Everything is allocated once per device, at init.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace {

constexpr int kMaxDevices = 16;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLASLt workspace: 32 MiB (Hopper recommendation)

struct DeviceState {
  bool ready = false;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // (kWorkspaceBytes)
  void* scratch = nullptr;    // (kScratchBytes)
  cudaDeviceProp props{};
};

DeviceState g_devices[kMaxDevices];
std::mutex g_init_mutex;
thread_local int t_device = -1;
thread_local cudaStream_t t_stream = nullptr;
std::atomic<uint64_t> g_host_waits{0};

bool trace_host_waits() {
  static const bool on = [] {
    const char* v = std::getenv("RINGTRAIN_TRACE_HOST_WAITS");
    return v && *v && *v != '0';
  }();
  return on;
}

void count_host_wait(const char* why) {
  const uint64_t n = g_host_waits.fetch_add(1, std::memory_order_relaxed) + 1;
  if (trace_host_waits()) std::fprintf(stderr, "[ringtrain] host wait #%llu: %s\n", (unsigned long long)n, why);
}

DeviceState& state_of(int device) {
  RT_CHECK(device >= 0 && device < kMaxDevices,
           "CUDA device index " << device << " is out of range (at most " << kMaxDevices << " devices)");
  return g_devices[device];
}

}  // namespace

void init(int device) {
  DeviceState& s = state_of(device);
  if (t_device != device) {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    RT_CHECK(device < count, "cuda:" << device << " requested but only " << count
                                     << " CUDA devices are visible; check CUDA_VISIBLE_DEVICES or the rank mapping");
    CUDA_CHECK(cudaSetDevice(device));
    t_device = device;
  }
  if (s.ready) return;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (s.ready) return;
  CUDA_CHECK(cudaGetDeviceProperties(&s.props, device));
  CUBLAS_CHECK(cublasLtCreate(&s.lt));
  CUDA_CHECK(cudaMalloc(&s.workspace, kWorkspaceBytes));
  CUDA_CHECK(cudaMalloc(&s.scratch, kScratchBytes));
  CUDA_CHECK(cudaMemset(s.scratch, 0, kScratchBytes));  // reductions that clean up after themselves start at 0
  s.ready = true;
}

cudaStream_t current_stream() { return t_stream; }
void set_current_stream(cudaStream_t stream) { t_stream = stream; }

cudaStream_t stream_for(const Tensor& t, const char* op) {
  RT_CHECK(t.device.is_cuda(), op << ": expected a CUDA tensor, got one on " << t.device.str());
  if (t_device != t.device.index || !g_devices[t.device.index].ready) init(t.device.index);
  return t_stream;
}

cublasLtHandle_t cublaslt_handle() { return state_of(t_device < 0 ? 0 : t_device).lt; }
void* cublaslt_workspace() { return state_of(t_device < 0 ? 0 : t_device).workspace; }
size_t cublaslt_workspace_bytes() { return kWorkspaceBytes; }
void* device_scratch() { return state_of(t_device < 0 ? 0 : t_device).scratch; }
// Initializes the device first: a caller that asks before any op ran (a test's capability check, the start-up
// check of train.precision: fp8) must see the real properties, not a zeroed struct.
const cudaDeviceProp& device_props() {
  const int device = t_device < 0 ? 0 : t_device;
  if (!state_of(device).ready) init(device);
  return state_of(device).props;
}

void host_wait(cudaStream_t stream, const char* why) {
  count_host_wait(why);
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void host_wait_event(cudaEvent_t event, const char* why) {
  count_host_wait(why);
  CUDA_CHECK(cudaEventSynchronize(event));
}

uint64_t host_wait_count() { return g_host_waits.load(std::memory_order_relaxed); }

}  // namespace cuda
}  // namespace rt
