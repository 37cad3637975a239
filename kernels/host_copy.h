// Copies between device tensors and pinned host memory on a copy stream of their own, ordered against the
// compute stream (rt::cuda::current_stream) by events, so they run under compute (activation offload,
// DESIGN.md "Memory at long context"). CUDA only: constructing one for a CPU device throws, naming the fix.
#pragma once
#include <cstddef>
#include <memory>

#include "kernels/tensor.h"

namespace rt {

class AsyncHostCopier {
 public:
  explicit AsyncHostCopier(Device device);
  ~AsyncHostCopier();
  AsyncHostCopier(const AsyncHostCopier&) = delete;
  AsyncHostCopier& operator=(const AsyncHostCopier&) = delete;

  // Posted after everything launched so far on the compute stream (which covers the source's writes and the
  // destination's last reads). host must be pinned and hold src.nbytes(). Returns a ticket for wait().
  int to_host(void* host, const Tensor& src);
  int to_device(Tensor dst, const void* host);
  // The compute stream (not the host) waits for the ticket's copy; each ticket is waited at most once.
  void wait(int ticket);

  // Pinned host memory (cudaHostAlloc), checked with the size in the message; and its release.
  static void* alloc_pinned(size_t bytes);
  static void free_pinned(void* p);

  struct State;  // the stream and events (kernels/host_copy.cpp)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace rt
