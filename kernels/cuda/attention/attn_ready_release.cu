// attn_ready_release on CUDA (kernels/attn_ready_flags.h): a 1-thread kernel on the current stream that stores the
// call's epoch into one ready word with release semantics at GPU scope. The stream's earlier work (the rows' copy or
// unpack) has completed and is visible to it (stream order), and the release makes those writes visible to a unit of
// the work-list forward that reads the word with ld.acquire.gpu (attn_fwd_work_list_ready.cuh). It needs one SM for
// a moment: the persistent list forward leaves AttnReadyFlags::free_sms of them free for it.
#include <cstdint>
#include <mutex>

#include "kernels/attn_ready_flags.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace {

__global__ void ready_release_kernel(unsigned* word, unsigned epoch) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(word), "r"(epoch) : "memory");
}

}  // namespace

void gather_rows_load_kernels();  // kernels/cuda/gather_rows.cu

// kernels/attn_ready_delivery.h: the flag kernel and the unpack's kernels loaded on `device`, once per device.
void attn_ready_load_delivery_kernels(int device) {
  static std::mutex mutex;
  static bool loaded[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mutex);
  bool& done = loaded[device_slot(device)];
  if (done) return;
  init(device);  // selects the device on this thread: the attributes' query loads the kernels there
  cudaFuncAttributes attributes;
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, ready_release_kernel));
  gather_rows_load_kernels();
  done = true;
}

void attn_ready_release(const AttnReadyFlags& flags, int source) {
  cudaStream_t stream = stream_for(flags.ready, "attn_ready_release");
  unsigned* word = static_cast<unsigned*>(flags.ready.data) + source;
  ready_release_kernel<<<1, 1, 0, stream>>>(word, flags.epoch);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace rt
