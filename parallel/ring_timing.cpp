// The host-clock RingTimer and the factory hook for device timers (parallel/ring_timing.h).
#include "parallel/ring_timing.h"

#include <atomic>
#include <chrono>

#ifdef RINGTRAIN_HAVE_CUDA
#include "parallel/cuda/cuda_ring_timer.h"
#endif

namespace rt {

namespace {

class HostRingTimer final : public RingTimer {
 public:
  void begin(Phase) override { start_ = clock::now(); }
  void end(Phase phase) override {
    const double s = std::chrono::duration<double>(clock::now() - start_).count();
    (phase == Phase::compute ? compute_s_ : comm_s_) += s;
  }
  void finish(RingTimings& into) override {
    into.compute_s += compute_s_;
    into.exposed_comm_s += comm_s_;
    compute_s_ = comm_s_ = 0;
  }

 private:
  using clock = std::chrono::steady_clock;
  clock::time_point start_{};
  double compute_s_ = 0, comm_s_ = 0;
};

std::atomic<RingTimerFactory> g_device_factory{nullptr};

}  // namespace

void set_ring_timer_factory(RingTimerFactory factory) { g_device_factory.store(factory); }

std::unique_ptr<RingTimer> make_ring_timer(Device device) {
  if (!device.is_cpu()) {
    if (RingTimerFactory f = g_device_factory.load()) return f(device);
#ifdef RINGTRAIN_HAVE_CUDA
    return make_cuda_ring_timer(device);  // CUDA events on the compute stream (parallel/cuda/)
#endif
  }
  return std::make_unique<HostRingTimer>();
}

}  // namespace rt
