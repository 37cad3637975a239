// NcclWatchdog: a dead or stuck rank must end the job with a message, never a hang.
// Every NCCL operation enqueued by NcclComm is followed by watch(stream, op), which records a completion
// event. A thread polls, every poll interval:
//   - ncclCommGetAsyncError: any error other than ncclInProgress is fatal;
//   - the events in order: an operation still not complete `timeout_s` after it was enqueued is fatal
//     (a peer died, hangs, or never posted the matching call).
// Fatal: one line "ringtrain: error on rank R: ..." on stderr, ncclCommAbort (which also releases the
// kernels spinning on the dead peer), then the process exits with status 1; mpirun then ends the job.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rt {

class NcclWatchdog {
 public:
  // label names the communicator in messages, e.g. "nccl comm of 4 ranks".
  NcclWatchdog(ncclComm_t comm, int device, double timeout_s, int world_rank, std::string label);
  ~NcclWatchdog();  // stops the thread (call drain() first to wait for what is in flight)
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Records a completion event on `stream` right after `op` was enqueued there. op: a string literal.
  void watch(cudaStream_t stream, const char* op);
  // Blocks until every watched operation completed (the thread still enforces the timeout meanwhile).
  void drain();
  double timeout_s() const { return timeout_s_; }

 private:
  using clock = std::chrono::steady_clock;
  struct Entry {
    cudaEvent_t event;
    clock::time_point enqueued;
    const char* op;
  };
  void loop();
  [[noreturn]] void fatal(const std::string& what, int code = 1);  // code 4 (kExitWatchdog) for a timeout

  ncclComm_t comm_;
  int device_;
  double timeout_s_;
  int world_rank_;
  std::string label_;
  std::mutex mu_;
  std::condition_variable idle_;
  bool stop_ = false;
  std::deque<Entry> pending_;
  std::vector<cudaEvent_t> free_;  // recycled events
  std::thread thread_;
};

// RINGTRAIN_NCCL_TIMEOUT_S when set (> 0), else 600 s.
double default_nccl_timeout_s();

}  // namespace rt
