// StepGraph (kernels/step_graph.h): a non-blocking stream of its own, the captured graph, two events that order a
// replay against the current stream, and the pinned staging buffer whose copy is the graph's first node.
#include "kernels/step_graph.h"

#include <cstring>

#include "kernels/device_memory.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

namespace rt {

#ifdef RINGTRAIN_HAVE_CUDA

struct StepGraph::State {
  int device = 0;
  Tensor inputs;                     // (inputs.nbytes()) on the device: what the launches read per step
  void* staging = nullptr;           // (inputs.nbytes()) pinned host
  cudaStream_t stream = nullptr;     // the graph's (non-blocking) stream
  cudaEvent_t before = nullptr;      // recorded on the current stream; the replay waits for it
  cudaEvent_t after = nullptr;       // recorded after the replay; the current stream waits for it
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool pending = false;              // a replay or eager run was posted since the last staging() check
};

StepGraph::StepGraph(Device device, Tensor inputs) : state_(std::make_unique<State>()) {
  RT_CHECK(device.is_cuda() && inputs.device == device,
           "a CUDA graph of the decode step needs a CUDA device and its inputs on it; on the CPU use --cuda-graph off");
  State& s = *state_;
  s.device = device.index;
  s.inputs = inputs;
  cuda::init(device.index);
  CUDA_CHECK(cudaHostAlloc(&s.staging, inputs.nbytes(), cudaHostAllocDefault));
  std::memset(s.staging, 0, inputs.nbytes());
  CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&s.before, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&s.after, cudaEventDisableTiming));
}

StepGraph::~StepGraph() {
  State& s = *state_;
  cudaSetDevice(s.device);
  if (s.stream) cudaStreamSynchronize(s.stream);  // nothing in flight reads the staging or the graph
  if (s.exec) cudaGraphExecDestroy(s.exec);
  if (s.graph) cudaGraphDestroy(s.graph);
  if (s.after) cudaEventDestroy(s.after);
  if (s.before) cudaEventDestroy(s.before);
  if (s.stream) cudaStreamDestroy(s.stream);
  if (s.staging) cudaFreeHost(s.staging);
}

bool StepGraph::available(Device device) { return device.is_cuda() && cuda_available(); }

void* StepGraph::staging() {
  State& s = *state_;
  if (s.pending && cudaEventQuery(s.after) != cudaSuccess) cuda::host_wait_event(s.after, "step graph: staging reuse");
  s.pending = false;
  return s.staging;
}

namespace {

// The graph's stream waits for the current stream's work so far; the ops launch on the graph's stream until the
// guard ends (then the current stream waits for the graph's stream).
class OnGraphStream {
 public:
  OnGraphStream(cudaStream_t graph_stream, cudaEvent_t before, cudaEvent_t after)
      : graph_stream_(graph_stream), after_(after), previous_(cuda::current_stream()) {
    CUDA_CHECK(cudaEventRecord(before, previous_));
    CUDA_CHECK(cudaStreamWaitEvent(graph_stream_, before, 0));
    cuda::set_current_stream(graph_stream_);
  }
  ~OnGraphStream() {
    cuda::set_current_stream(previous_);
    // Errors here are already reported by the calls that failed; a destructor must not throw.
    if (cudaEventRecord(after_, graph_stream_) == cudaSuccess) cudaStreamWaitEvent(previous_, after_, 0);
  }

 private:
  cudaStream_t graph_stream_;
  cudaEvent_t after_;
  cudaStream_t previous_;
};

}  // namespace

void StepGraph::run_eager(const std::function<void()>& launches) {
  State& s = *state_;
  OnGraphStream on(s.stream, s.before, s.after);
  CUDA_CHECK(cudaMemcpyAsync(s.inputs.data, s.staging, s.inputs.nbytes(), cudaMemcpyHostToDevice, s.stream));
  launches();
  s.pending = true;
}

void StepGraph::capture(const std::function<void()>& launches) {
  State& s = *state_;
  RT_CHECK(s.exec == nullptr, "StepGraph: the step is captured once; replay() it");
  // Nothing runs: the calls are recorded, the staging copy first.
  const cudaStream_t previous = cuda::current_stream();
  CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  cuda::set_current_stream(s.stream);
  try {
    CUDA_CHECK(cudaMemcpyAsync(s.inputs.data, s.staging, s.inputs.nbytes(), cudaMemcpyHostToDevice, s.stream));
    launches();
  } catch (...) {
    cuda::set_current_stream(previous);
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(s.stream, &broken);  // ends the (invalidated) capture so the stream is usable again
    if (broken) cudaGraphDestroy(broken);
    (void)cudaGetLastError();
    throw;
  }
  cuda::set_current_stream(previous);
  CUDA_CHECK(cudaStreamEndCapture(s.stream, &s.graph));
  CUDA_CHECK(cudaGraphInstantiateWithFlags(&s.exec, s.graph, 0));
  CUDA_CHECK(cudaGraphUpload(s.exec, s.stream));
}

void StepGraph::replay() {
  State& s = *state_;
  RT_CHECK(s.exec != nullptr, "StepGraph: replay() before a successful capture()");
  OnGraphStream on(s.stream, s.before, s.after);
  CUDA_CHECK(cudaGraphLaunch(s.exec, s.stream));
  s.pending = true;
}

bool StepGraph::captured() const { return state_->exec != nullptr; }

size_t StepGraph::nodes() const {
  size_t n = 0;
  if (state_->graph) CUDA_CHECK(cudaGraphGetNodes(state_->graph, nullptr, &n));
  return n;
}

#else  // no CUDA in this build

struct StepGraph::State {};

StepGraph::StepGraph(Device, Tensor) {
  RT_CHECK(false, "this ringtrain was built without CUDA, so it has no CUDA graphs; use --cuda-graph off");
}
StepGraph::~StepGraph() = default;
bool StepGraph::available(Device) { return false; }
void* StepGraph::staging() { return nullptr; }
void StepGraph::run_eager(const std::function<void()>&) {}
void StepGraph::capture(const std::function<void()>&) {}
void StepGraph::replay() {}
bool StepGraph::captured() const { return false; }
size_t StepGraph::nodes() const { return 0; }

#endif

}  // namespace rt
