// The gather scheme's side stream on a CUDA rank (RingGather::side; parallel/cp/ring_attention_gather.cpp, ready
// flags): the forward's pack, exchange, wait, unpack and flag go on a non-blocking stream of their own, so that none of
// them is ordered behind the work-list kernel that waits for the flag on the compute stream (kernels/attn_ready_flags.h
// "Deadlock"). The exchange is posted while this stream is current, so NcclComm's comm stream follows it and
// NcclComm::wait makes it (not the compute stream) wait; MpiComm's staging copies run on it too.
// No CUDA types here; the CUDA build implements it in parallel/cp/cuda/gather_side_stream.cpp.
#pragma once
#include <memory>

#include "kernels/tensor.h"

namespace rt {

class GatherSideStream {
 public:
  virtual ~GatherSideStream() = default;
  // The side stream waits for the work queued so far on the compute stream (rt::cuda::current_stream()).
  virtual void follow_compute() = 0;
  // The compute stream waits for the work queued so far on the side stream.
  virtual void lead_compute() = 0;
  // Makes the side stream the current stream of this thread (ops and comms launch there) until leave().
  virtual void enter() = 0;
  virtual void leave() = 0;
};

// A side stream on `device` (CUDA only; refuses a CPU device or a build without CUDA).
std::shared_ptr<GatherSideStream> make_gather_side_stream(Device device);

// Runs its scope with the side stream current.
class GatherSideScope {
 public:
  explicit GatherSideScope(GatherSideStream& s) : s_(s) { s_.enter(); }
  ~GatherSideScope() { s_.leave(); }
  GatherSideScope(const GatherSideScope&) = delete;
  GatherSideScope& operator=(const GatherSideScope&) = delete;

 private:
  GatherSideStream& s_;
};

}  // namespace rt
