// A test harness for the work-list forward's ready flags (kernels/attn_ready_flags.h): a one-CTA kernel on a stream
// of the test's that plays the exchange. It starts, tells the host so (a host-mapped word), waits until the host says
// go (another host-mapped word; at most 2 s, then it goes anyway) and then `delay_ns` more (%globaltimer), copies the
// staged rows into the gathered buffers (plain stores), and raises ready[0] = epoch with release semantics at GPU
// scope, as the gather path's flag kernel will. Used by tests/gpu/test_cuda_attn_work_list_flags.cpp.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace rt::test {

struct DelayedDelivery {
  const void* src[2] = {nullptr, nullptr};  // the staged rows (e.g. k2, v2 as bf16), 16-byte aligned
  void* dst[2] = {nullptr, nullptr};        // the gathered buffers the list kernel reads
  size_t bytes[2] = {0, 0};                 // multiples of 16
  unsigned* ready = nullptr;                // the flag word (device)
  unsigned epoch = 0;
  unsigned long long delay_ns = 0;          // after the host's go
};

// Host-mapped words the harness kernel and the host share (pinned, mapped): started (kernel -> host), go (host ->
// kernel). One per test; not thread-safe.
class DeliverySignals {
 public:
  DeliverySignals();
  ~DeliverySignals();
  DeliverySignals(const DeliverySignals&) = delete;
  DeliverySignals& operator=(const DeliverySignals&) = delete;
  // Launches the harness on `stream` (the go word reset first) and waits until it runs (false: not within 5 s).
  bool launch(const DelayedDelivery& d, cudaStream_t stream);
  void go();  // lets the running harness deliver

 private:
  volatile int* host_ = nullptr;  // (2) [0] started, [1] go
  int* device_ = nullptr;         // the same words, as the device sees them
};

}  // namespace rt::test
