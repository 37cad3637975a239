// The unit counters of the persistent attention kernels (bwd v5, its work-list mode, the work-list forward's
// persistent form): CTA c runs unit c first, then fetches the next unit from this counter; the launch's last fetch
// sets it back to 0, so it is zeroed once and serves one launch at a time per device and kernel. Each kernel has its
// own counter: two of them may run at once on different streams.
#pragma once
#include <cuda_runtime.h>

namespace rt {
namespace cuda {

enum class PersistentKernel { bwd_v5, bwd_work_list, fwd_work_list, count };

// The counter (one int on `device`, zeroed on `stream` at first use) of `kernel` on `device`.
int* persistent_unit_counter(PersistentKernel kernel, int device, cudaStream_t stream);

}  // namespace cuda
}  // namespace rt
