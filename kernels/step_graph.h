// One step's kernel launches captured once as a CUDA graph and replayed per step (the decode step of `ringtrain
// generate`, DESIGN.md "Generate"). Every value that changes from step to step lives in one small device buffer,
// `inputs`, that the captured launches read; the graph's first node copies it from a pinned host staging buffer,
// so a replay is: write staging(), replay(). Nothing inside the graph may depend on a host value that changes per
// step (a kernel argument, a copy's address, a launch size): those are frozen at capture.
//   run_eager(launches): the staging copy and launches() now; capture(launches): the same calls into the graph.
//   replay(): the copy and the graph, on the graph's stream, ordered after and before the current stream's work.
// The ops launch on rt::cuda::current_stream(), which is the graph's stream while launches() runs. CUDA devices
// only: available() says whether this build and device have them.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "kernels/tensor.h"

namespace rt {

class StepGraph {
 public:
  // inputs: the device buffer the launches read their per-step values from (its nbytes() are copied per step).
  StepGraph(Device device, Tensor inputs);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  static bool available(Device device);  // a CUDA build and a CUDA device

  // Pinned host memory of inputs.nbytes(), free to write once the previous replay's copy has read it (this call
  // waits for that, which a caller that has read the step's results never does).
  void* staging();
  // copies the staging in and runs launches() now, on the graph's stream (the first launch of every kernel happens
  // outside a capture; the graphed decode's step before capture, and its path when the capture fails).
  void run_eager(const std::function<void()>& launches);
  // Records the staging copy and launches() into the graph; nothing runs. Throws rt::Error naming the CUDA error
  // when the capture fails (then replay() refuses; run_eager still works).
  void capture(const std::function<void()>& launches);
  void replay();
  bool captured() const;
  size_t nodes() const;  // the graph's node count (the copy and every launch)

  struct State;  // the stream, graph, events and staging (kernels/step_graph.cpp)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace rt
