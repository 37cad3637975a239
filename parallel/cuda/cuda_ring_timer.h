// The CUDA-event RingTimer (parallel/ring_timing.h): begin()/end() record events on the compute stream
// (rt::cuda::current_stream()), finish() waits for the last one and sums the elapsed times per phase. So
// "compute" is GPU time of the attention work and "exposed comm" the time the compute stream stood waiting
// for a hop (NCCL: the event wait in Comm::wait; MPI staging: the host-side transfer).
// make_ring_timer uses it for CUDA tensors unless another factory was registered.
#pragma once
#include <memory>

#include "parallel/ring_timing.h"

namespace rt {

std::unique_ptr<RingTimer> make_cuda_ring_timer(Device device);

}  // namespace rt
