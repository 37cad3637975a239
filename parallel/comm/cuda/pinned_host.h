// Page-locked host memory for MpiComm's staging of CUDA tensors (parallel/comm/mpi_comm.h, HostStaging): copies
// between pinned memory and the GPU run at full PCIe/NVLink-C2C speed and never go through a bounce buffer.
#pragma once
#include <cstddef>

namespace rt {

void* pinned_host_alloc(size_t bytes);  // cudaHostAlloc, checked (the message names the size)
void pinned_host_free(void* ptr);       // cudaFreeHost; not checked (teardown)

}  // namespace rt
