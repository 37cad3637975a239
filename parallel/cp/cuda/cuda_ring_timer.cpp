#include "parallel/cp/cuda/cuda_ring_timer.h"

#include <vector>

#include "kernels/cuda_api.h"

namespace rt {

namespace {

class CudaRingTimer final : public RingTimer {
 public:
  // No CUDA call here: `ringtrain plan` builds CUDA models on machines without a GPU.
  explicit CudaRingTimer(Device device) : device_(device.index) {}
  ~CudaRingTimer() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);  // not checked: teardown
  }

  void begin(Phase phase) override {
    phases_.push_back(phase);
    record();
  }
  void end(Phase) override { record(); }
  void end_call() override { call_ends_.push_back(phases_.size()); }

  void collect(std::vector<RingTimings>& calls) override {
    const size_t marked = call_ends_.empty() ? 0 : call_ends_.back();  // intervals of finished calls
    if (marked > 0) {
      // Events complete in stream order: once the last one has, every earlier one has too.
      cuda::host_wait_event(events_[2 * marked - 1], "ring attention timings (CUDA events) read");
      size_t interval = 0;
      for (size_t end : call_ends_) {
        RingTimings t;
        for (; interval < end; ++interval) {
          float ms = 0;
          CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * interval], events_[2 * interval + 1]));
          (phases_[interval] == Phase::compute ? t.compute_s : t.exposed_comm_s) += double(ms) * 1e-3;
        }
        calls.push_back(t);
      }
    } else {
      for (size_t i = 0; i < call_ends_.size(); ++i) calls.push_back(RingTimings{});  // calls with no interval
    }
    discard();
  }

  void discard() override {
    used_ = 0;  // the events are re-recorded by the next calls (legal even if they have not completed)
    phases_.clear();
    call_ends_.clear();
  }

  size_t pending() const override { return used_; }

 private:
  void record() {
    cuda::init(device_);
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));  // with timing
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[used_++], cuda::current_stream()));
  }

  int device_;
  std::vector<cudaEvent_t> events_;  // begin, end, begin, end, ... of the pending calls (a pool: reused)
  size_t used_ = 0;                  // events recorded since the last collect()/discard()
  std::vector<Phase> phases_;        // one per interval
  std::vector<size_t> call_ends_;    // per marked call: the number of intervals up to its end
};

}  // namespace

std::unique_ptr<RingTimer> make_cuda_ring_timer(Device device) { return std::make_unique<CudaRingTimer>(device); }

}  // namespace rt
