#include "parallel/cuda/cuda_ring_timer.h"

#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

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

  void finish(RingTimings& into) override {
    if (used_ >= 2) {
      CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
      for (size_t i = 0; i + 1 < used_; i += 2) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
        (phases_[i / 2] == Phase::compute ? into.compute_s : into.exposed_comm_s) += double(ms) * 1e-3;
      }
    }
    used_ = 0;  // the events are reused by the next call
    phases_.clear();
  }

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
  std::vector<cudaEvent_t> events_;  // begin, end, begin, end, ... of this call
  size_t used_ = 0;
  std::vector<Phase> phases_;  // one per interval
};

}  // namespace

std::unique_ptr<RingTimer> make_cuda_ring_timer(Device device) { return std::make_unique<CudaRingTimer>(device); }

}  // namespace rt
