// Loading the kernels that deliver gathered rows under a waiting work-list forward (issue 46;
// kernels/attn_ready_flags.h "Deadlock"). With CUDA's lazy loading (the default since CUDA 12.2 on Linux;
// CUDA_MODULE_LOADING=LAZY) a kernel's code is loaded at its first launch in the process, and that load may need the
// context to be idle: a first launch of gather_rows or of the flag kernel while the list kernel spins on its ready
// flags then waits for the list kernel, which waits for the flag that launch would raise, until the watchdog ends the
// call (the likely cause of the 10 s timeout of tests/gpu/test_cuda_attn_work_list_persistent.cpp on the H200,
// 2026-12-04 jobs 4 and 5). Loading them before the list kernel is launched (cudaFuncGetAttributes loads a kernel)
// removes the wait; any other kernel a caller launches under the list kernel must be loaded the same way (NCCL loads
// its own at communicator set-up).
#pragma once
#include "kernels/tensor.h"

namespace rt {

// Loads, on `device`, the kernels of the rows' delivery that a flagged list forward may wait for: gather_rows' (both
// forms) and attn_ready_release's. Once per device and process (later calls return at once); thread-safe. A host
// device or a build without CUDA: nothing to load. Call before the first list kernel launched with ready flags.
void attn_ready_load_delivery_kernels(const Device& device);

}  // namespace rt
