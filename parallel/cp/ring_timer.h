// Which RingTimer (parallel/cp/ring_timing.h) a device gets: the host clock on CPU, CUDA events on a CUDA device
// (parallel/cp/cuda/cuda_ring_timer.h) unless a factory was registered. Kept apart from the interface so that the
// CUDA timer, which implements the interface, sits below the choice and no include runs back up.
#pragma once
#include <memory>

#include "parallel/cp/ring_timing.h"

namespace rt {

// Builds the timer for tensors on a CUDA device; nullptr restores the default (CUDA events). Tests and tools
// register their own.
using RingTimerFactory = std::unique_ptr<RingTimer> (*)(Device device);
void set_ring_timer_factory(RingTimerFactory factory);
// Host clock on CPU; on CUDA the registered factory's timer, else CUDA events.
std::unique_ptr<RingTimer> make_ring_timer(Device device);

}  // namespace rt
