// The host-clock RingTimer and the choice of a device's timer (parallel/cp/ring_timer.h).
#include "parallel/cp/ring_timer.h"

#include <atomic>
#include <chrono>

#ifdef RINGTRAIN_HAVE_CUDA
#include "parallel/cp/cuda/cuda_ring_timer.h"
#endif

namespace rt {

namespace {

class HostRingTimer final : public RingTimer {
 public:
  void begin(Phase) override { start_ = clock::now(); }
  void end(Phase phase) override {
    const double s = std::chrono::duration<double>(clock::now() - start_).count();
    (phase == Phase::compute ? current_.compute_s : current_.exposed_comm_s) += s;
  }
  void end_call() override {
    done_.push_back(current_);
    current_ = RingTimings{};
  }
  void collect(std::vector<RingTimings>& calls) override {
    calls.insert(calls.end(), done_.begin(), done_.end());
    done_.clear();
    current_ = RingTimings{};
  }
  void discard() override {
    done_.clear();
    current_ = RingTimings{};
  }
  size_t pending() const override { return done_.size(); }

 private:
  using clock = std::chrono::steady_clock;
  clock::time_point start_{};
  RingTimings current_;              // the call in progress (compute_s, exposed_comm_s)
  std::vector<RingTimings> done_;    // calls marked and not yet collected
};

std::atomic<RingTimerFactory> g_device_factory{nullptr};

}  // namespace

void set_ring_timer_factory(RingTimerFactory factory) { g_device_factory.store(factory); }

std::unique_ptr<RingTimer> make_ring_timer(Device device) {
  if (!device.is_cpu()) {
    if (RingTimerFactory f = g_device_factory.load()) return f(device);
#ifdef RINGTRAIN_HAVE_CUDA
    return make_cuda_ring_timer(device);  // CUDA events on the compute stream (parallel/cp/cuda/)
#endif
  }
  return std::make_unique<HostRingTimer>();
}

}  // namespace rt
