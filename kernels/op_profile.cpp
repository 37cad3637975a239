// rt::op_profile_* (kernels/op_profile.h): a pair of CUDA events per timed op, recorded on the op's stream
// (the thread's current stream) by cuda::OpProfileScope, read when the window closes. Without CUDA the
// window is always empty.
#include "kernels/op_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#ifdef RINGTRAIN_HAVE_CUDA
#include "kernels/cuda/check.h"
#include "kernels/cuda/op_profile_scope.h"
#include "kernels/cuda/runtime.h"
#endif

namespace rt {
namespace {

std::atomic<bool> g_active{false};
std::mutex g_mutex;

}  // namespace

#ifdef RINGTRAIN_HAVE_CUDA
namespace {

struct TimedOp {
  const char* name;
  cudaEvent_t start, stop;
};

std::vector<TimedOp> g_ops;           // this window's ops, in launch order
std::vector<cudaEvent_t> g_free_events;  // events of earlier windows, for reuse

cudaEvent_t take_event() {
  if (!g_free_events.empty()) {
    const cudaEvent_t e = g_free_events.back();
    g_free_events.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void recycle_window() {
  for (const TimedOp& op : g_ops) g_free_events.push_back(op.start), g_free_events.push_back(op.stop);
  g_ops.clear();
}

}  // namespace

namespace cuda {

OpProfileScope::OpProfileScope(const char* name) {
  if (!g_active.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  name_ = name;
  start_ = take_event();
  CUDA_CHECK(cudaEventRecord(start_, current_stream()));
}

OpProfileScope::~OpProfileScope() {
  if (start_ == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  const cudaEvent_t stop = take_event();
  // A destructor must not throw: a failed record drops this op from the profile and says so.
  const cudaError_t err = cudaEventRecord(stop, current_stream());
  if (err != cudaSuccess) {
    std::fprintf(stderr, "[ringtrain] op profile: cudaEventRecord after %s failed: %s\n", name_,
                 cudaGetErrorString(err));
    g_free_events.push_back(start_), g_free_events.push_back(stop);
    return;
  }
  g_ops.push_back({name_, start_, stop});
}

}  // namespace cuda

#else
namespace {
void recycle_window() {}
}  // namespace
#endif

void op_profile_begin() {
  std::lock_guard<std::mutex> lock(g_mutex);
  recycle_window();
  g_active.store(true);
}

bool op_profile_active() { return g_active.load(); }

std::vector<OpTime> op_profile_end() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_active.store(false);
  std::map<std::string, OpTime> by_name;
#ifdef RINGTRAIN_HAVE_CUDA
  for (const TimedOp& op : g_ops) {
    float ms = 0;
    if (cudaEventQuery(op.stop) != cudaSuccess) cuda::host_wait_event(op.stop, "op_profile_end");
    CUDA_CHECK(cudaEventElapsedTime(&ms, op.start, op.stop));
    OpTime& t = by_name[op.name];
    t.name = op.name, t.calls += 1, t.ms += ms;
  }
#endif
  recycle_window();
  std::vector<OpTime> out;
  for (auto& [name, t] : by_name) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace rt
