// The CUDA-event RingTimer (parallel/cp/ring_timing.h): begin()/end() record events on the compute stream
// (rt::cuda::current_stream()); end_call() marks a call boundary without waiting; collect() waits once, for
// the last recorded event, and sums the elapsed times per phase of every pending call. So "compute" is GPU
// time of the attention work and "exposed comm" the time the compute stream stood waiting for a hop (NCCL:
// the event wait in Comm::wait; MPI staging: the host-side transfer). discard() forgets pending events
// without waiting: re-recording an event that has not completed yet is legal.
// make_ring_timer (parallel/cp/ring_timer.h) uses it for CUDA tensors unless another factory was registered.
#pragma once
#include <memory>

#include "parallel/cp/ring_timing.h"

namespace rt {

std::unique_ptr<RingTimer> make_cuda_ring_timer(Device device);

}  // namespace rt
