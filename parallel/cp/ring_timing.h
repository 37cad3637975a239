// Where ring attention spends its time (DESIGN.md "Metrics and output": compute vs exposed communication).
//   compute:        the attention kernels, K/V packing, the dK/dV accumulator adds and the final copies;
//   exposed comm:   time blocked in Comm::wait() or posting an exchange, i.e. the part of the hops that the
//                   compute did not hide.
//   exposed a2a:    with parallel.cp_a2a > 1, time blocked posting or waiting for the all-to-all head exchange
//                   (parallel/cp/context_attention.h); its packing counts as compute.
// RingAttention measures every forward and backward call with a RingTimer.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/tensor.h"

namespace rt {

struct RingTimings {
  int64_t calls = 0;          // forward and backward calls
  int64_t steps = 0;          // ring steps (cp per call)
  double compute_s = 0;
  double exposed_comm_s = 0;  // the ring's hops
  double exposed_a2a_s = 0;   // the all-to-all exchange
  // Bytes this rank sent (K/V and dK/dV hops), and what the plain ring, every hop, would have sent: packed documents
  // skip the hops nobody needs (parallel/schedule/ring_hops.h). Filled by RingAttention, not by the timer.
  double sent_bytes = 0, ring_bytes = 0;
  void reset() { *this = RingTimings{}; }
  void accumulate(const RingTimings& other) {
    calls += other.calls, steps += other.steps;
    compute_s += other.compute_s, exposed_comm_s += other.exposed_comm_s, exposed_a2a_s += other.exposed_a2a_s;
    sent_bytes += other.sent_bytes, ring_bytes += other.ring_bytes;
  }
  double total_s() const { return compute_s + exposed_comm_s + exposed_a2a_s; }
};

// Measures the intervals of the calls. The host-clock timer is exact on CPU, where kernels run synchronously.
// On CUDA the host clock would time only kernel launches and event waits: the CUDA backend registers a
// timer (set_ring_timer_factory) that records CUDA events on the compute stream in begin()/end(). Resolving
// them needs the host to wait for the GPU, so it is deferred: end_call() only marks a call boundary, and
// collect() resolves every call marked since the last collect()/discard() (on CUDA: one wait, for the last
// event). RingAttention collects when its timings are read, so a training step that does not log waits for
// nothing here.
class RingTimer {
 public:
  enum class Phase { compute, comm };
  virtual ~RingTimer() = default;
  virtual void begin(Phase phase) = 0;
  virtual void end(Phase phase) = 0;
  // Marks the end of one call (forward or backward): the intervals since the previous mark belong to it.
  // Never waits.
  virtual void end_call() = 0;
  // Appends one RingTimings per call marked since the last collect()/discard(), oldest first, with compute_s
  // and exposed_comm_s set (calls and steps are the caller's). Intervals after the last mark are dropped.
  virtual void collect(std::vector<RingTimings>& calls) = 0;
  // Forgets the calls not yet collected, without waiting.
  virtual void discard() = 0;
  // What is held for calls not yet collected (CUDA events, or host-clock calls). The owner collects when
  // this passes kRingTimerMaxPending, which bounds the event pool.
  virtual size_t pending() const = 0;
};
constexpr size_t kRingTimerMaxPending = 65536;

// make_ring_timer (parallel/cp/ring_timer.h) builds the timer for a device.

// begin() on construction, end() on destruction (also while unwinding).
class RingTimerScope {
 public:
  RingTimerScope(RingTimer& timer, RingTimer::Phase phase) : timer_(timer), phase_(phase) { timer_.begin(phase_); }
  ~RingTimerScope() { timer_.end(phase_); }
  RingTimerScope(const RingTimerScope&) = delete;
  RingTimerScope& operator=(const RingTimerScope&) = delete;

 private:
  RingTimer& timer_;
  RingTimer::Phase phase_;
};

}  // namespace rt
