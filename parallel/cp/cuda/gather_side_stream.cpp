// GatherSideStream on CUDA (parallel/cp/gather_side_stream.h): a non-blocking stream and one event per direction of
// the waits (recorded again for every wait: a stream wait takes the event's latest record at the time it is queued).
#include "parallel/cp/gather_side_stream.h"

#include "kernels/cuda_api.h"

namespace rt {
namespace {

class CudaGatherSideStream final : public GatherSideStream {
 public:
  explicit CudaGatherSideStream(int device) {
    cuda::init(device);  // the ring's device on this thread (ops have selected it already)
    CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming));
  }
  ~CudaGatherSideStream() override {  // no checks: may run while unwinding; the queued work keeps the objects alive
    cudaEventDestroy(side_done_);
    cudaEventDestroy(compute_done_);
    cudaStreamDestroy(side_);
  }
  void follow_compute() override {
    CUDA_CHECK(cudaEventRecord(compute_done_, compute()));
    CUDA_CHECK(cudaStreamWaitEvent(side_, compute_done_, 0));
  }
  void lead_compute() override {
    CUDA_CHECK(cudaEventRecord(side_done_, side_));
    CUDA_CHECK(cudaStreamWaitEvent(compute(), side_done_, 0));
  }
  void enter() override {
    RT_CHECK(!entered_, "GatherSideStream: entered twice");
    previous_ = cuda::current_stream();
    cuda::set_current_stream(side_);
    entered_ = true;
  }
  void leave() override {
    if (!entered_) return;
    cuda::set_current_stream(previous_);
    entered_ = false;
  }

 private:
  cudaStream_t compute() const { return entered_ ? previous_ : cuda::current_stream(); }
  cudaStream_t side_ = nullptr, previous_ = nullptr;
  cudaEvent_t compute_done_ = nullptr, side_done_ = nullptr;
  bool entered_ = false;
};

}  // namespace

std::shared_ptr<GatherSideStream> make_gather_side_stream(Device device) {
  RT_CHECK(device.is_cuda(), "make_gather_side_stream: the side stream is for CUDA ranks, not " << device.str());
  return std::make_shared<CudaGatherSideStream>(device.index);
}

}  // namespace rt
