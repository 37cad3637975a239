#include "parallel/comm/cuda/nccl_watchdog.h"
#include "parallel/comm/fault.h"
#include "parallel/comm/watchdog.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "kernels/cuda_api.h"
#include "parallel/comm/cuda/nccl_check.h"

namespace rt {

namespace {
constexpr auto kPollInterval = std::chrono::milliseconds(20);
}  // namespace

std::string nccl_last_error_suffix() {
  const char* last = ncclGetLastError(nullptr);
  return last && *last ? std::string(" (") + last + ")" : std::string();
}

double default_nccl_timeout_s() {
  if (const char* v = std::getenv("RINGTRAIN_NCCL_TIMEOUT_S")) {
    const double s = std::atof(v);
    if (s > 0) return s;
  }
  return watchdog_timeout_s();  // parallel.timeout_s (600 s before the config is known)
}

NcclWatchdog::NcclWatchdog(ncclComm_t comm, int device, double timeout_s, int world_rank, std::string label)
    : comm_(comm), device_(device), timeout_s_(timeout_s), world_rank_(world_rank), label_(std::move(label)) {
  thread_ = std::thread([this] { loop(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  for (Entry& e : pending_) cudaEventDestroy(e.event);  // not checked: teardown
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

void NcclWatchdog::watch(cudaStream_t stream, const char* op) {
  std::lock_guard<std::mutex> lock(mu_);
  cudaEvent_t ev = nullptr;
  if (!free_.empty()) {
    ev = free_.back();
    free_.pop_back();
  } else {
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaEventRecord(ev, stream));
  pending_.push_back({ev, clock::now(), op});
}

void NcclWatchdog::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return pending_.empty(); });
}

void NcclWatchdog::fatal(const std::string& what, int code) {
  report_error_line("ringtrain: error on rank " + std::to_string(world_rank_) + " (" + this_host() + "): " + what);
  std::fflush(stdout);
  ncclCommAbort(comm_);  // not checked: we are exiting either way
  std::_Exit(code);
}

void NcclWatchdog::loop() {
  // Events and the comm belong to this device. This thread cannot throw, so a failure ends the job here.
  const cudaError_t set = cudaSetDevice(device_);
  if (set != cudaSuccess) fatal(std::string("NCCL watchdog could not select cuda:") + std::to_string(device_) + ": " +
                                cudaGetErrorString(set));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
      std::ostringstream os;
      os << "NCCL reported an asynchronous error on the " << label_ << ": " << ncclGetErrorString(async)
         << nccl_last_error_suffix() << ". A peer rank probably failed; aborting the job";
      fatal(os.str());
    }
    while (!pending_.empty()) {
      Entry& e = pending_.front();
      const cudaError_t q = cudaEventQuery(e.event);
      if (q == cudaSuccess) {
        free_.push_back(e.event);
        pending_.pop_front();
        continue;
      }
      if (q != cudaErrorNotReady) {
        fatal(std::string("CUDA error while waiting for NCCL ") + e.op + " on the " + label_ + ": " +
              cudaGetErrorString(q));
      }
      const double waited = std::chrono::duration<double>(clock::now() - e.enqueued).count();
      if (waited > timeout_s_) {
        std::ostringstream os;
        os << "NCCL " << e.op << " on the " << label_ << " did not complete within " << timeout_s_
           << " s: a peer rank died, hangs, or did not post the matching call. Aborting the job "
           << "(raise parallel.timeout_s, or RINGTRAIN_NCCL_TIMEOUT_S, if steps legitimately take this long)";
        fatal(os.str(), kExitWatchdog);
      }
      break;  // operations complete in order on a stream; check the next poll
    }
    if (pending_.empty()) idle_.notify_all();
    lock.unlock();
    std::this_thread::sleep_for(kPollInterval);
    lock.lock();
  }
}

}  // namespace rt
