// AsyncHostCopier (kernels/host_copy.h): a non-blocking copy stream, one "ready" event recorded on the compute
// stream before each copy and one "done" event per ticket that the compute stream waits on.
#include "kernels/host_copy.h"

#include <unordered_map>
#include <vector>

#ifdef RINGTRAIN_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

namespace rt {

#ifdef RINGTRAIN_HAVE_CUDA

struct AsyncHostCopier::State {
  int device = 0;
  cudaStream_t copy = nullptr;
  cudaEvent_t ready = nullptr;
  std::vector<cudaEvent_t> free;
  std::unordered_map<int, cudaEvent_t> posted;
  int next = 0;
};

AsyncHostCopier::AsyncHostCopier(Device device) : state_(std::make_unique<State>()) {
  RT_CHECK(device.is_cuda(), "activation offload copies GPU tensors to pinned host memory; on the CPU use "
                             "train.offload: none");
  state_->device = device.index;
  cuda::init(device.index);
  CUDA_CHECK(cudaStreamCreateWithFlags(&state_->copy, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&state_->ready, cudaEventDisableTiming));
}

AsyncHostCopier::~AsyncHostCopier() {
  cudaSetDevice(state_->device);
  if (state_->copy) cudaStreamSynchronize(state_->copy);  // nothing in flight into freed memory
  for (auto& [id, e] : state_->posted) cudaEventDestroy(e);
  for (cudaEvent_t e : state_->free) cudaEventDestroy(e);
  if (state_->ready) cudaEventDestroy(state_->ready);
  if (state_->copy) cudaStreamDestroy(state_->copy);
}

namespace {
int post_copy(AsyncHostCopier::State& s, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  CUDA_CHECK(cudaEventRecord(s.ready, cuda::current_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(s.copy, s.ready, 0));
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s.copy));
  cudaEvent_t done = nullptr;
  if (!s.free.empty()) {
    done = s.free.back();
    s.free.pop_back();
  } else {
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaEventRecord(done, s.copy));
  const int id = s.next++;
  s.posted[id] = done;
  return id;
}
}  // namespace

int AsyncHostCopier::to_host(void* host, const Tensor& src) {
  cuda::stream_for(src, "AsyncHostCopier::to_host");
  return post_copy(*state_, host, src.data, src.nbytes(), cudaMemcpyDeviceToHost);
}

int AsyncHostCopier::to_device(Tensor dst, const void* host) {
  cuda::stream_for(dst, "AsyncHostCopier::to_device");
  return post_copy(*state_, dst.data, host, dst.nbytes(), cudaMemcpyHostToDevice);
}

void AsyncHostCopier::wait(int ticket) {
  auto it = state_->posted.find(ticket);
  RT_CHECK(it != state_->posted.end(), "AsyncHostCopier::wait: copy " << ticket << " was never posted or already waited");
  CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(), it->second, 0));
  state_->free.push_back(it->second);
  state_->posted.erase(it);
}

void* AsyncHostCopier::alloc_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  RT_CHECK(err == cudaSuccess, "cudaHostAlloc of " << bytes / (size_t(1) << 20) << " MiB of pinned memory for the "
                               "activation offload failed (" << cudaGetErrorString(err) << "); lower "
                               "train.offload_layers, or use more GPUs (parallel.cp) so each holds fewer tokens");
  return p;
}

void AsyncHostCopier::free_pinned(void* p) {
  if (p) cudaFreeHost(p);
}

#else  // no CUDA backend

struct AsyncHostCopier::State {};
AsyncHostCopier::AsyncHostCopier(Device) {
  RT_CHECK(false, "activation offload needs the CUDA backend (GPU block inputs to pinned host memory); on the CPU "
                  "use train.offload: none");
}
AsyncHostCopier::~AsyncHostCopier() = default;
int AsyncHostCopier::to_host(void*, const Tensor&) { return -1; }
int AsyncHostCopier::to_device(Tensor, const void*) { return -1; }
void AsyncHostCopier::wait(int) {}
void* AsyncHostCopier::alloc_pinned(size_t) { return nullptr; }
void AsyncHostCopier::free_pinned(void*) {}

#endif

}  // namespace rt
