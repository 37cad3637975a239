// The host side of the work-list forward's ready flags (kernels/attn_ready_flags.h): the fault word's meaning, the
// watchdog's limit, the error's text, the argument checks, and the check that reads the fault word.
#include "kernels/attn_ready_flags.h"

#include "kernels/attn_ready_delivery.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kernels/ops.h"  // copy_cast

namespace rt {

#ifdef RINGTRAIN_HAVE_CUDA
namespace cuda {
void attn_ready_release(const AttnReadyFlags& flags, int source);  // kernels/cuda/attention/attn_ready_release.cu
void attn_ready_load_delivery_kernels(int device);                 // the same file
}
#endif

AttnReadyFault attn_ready_fault_decode(uint64_t word) {
  AttnReadyFault f;
  if (word == 0) return f;
  f.set = true;
  f.epoch = uint32_t(word >> 32);
  f.source = int(int64_t(uint32_t(word & 0xffffffffu)) - 1);
  return f;
}

uint64_t attn_ready_timeout_ns(double timeout_s, const char* op) {
  RT_CHECK(std::isfinite(timeout_s) && timeout_s > 0 && timeout_s < 1e9,
           op << ": the ready flags' timeout_s = " << timeout_s
              << " must be a positive number of seconds (parallel.timeout_s): the watchdog ends a wait for gathered "
                 "K/V that never arrives");
  const double ns = timeout_s * 1e9;
  return ns < 1.0 ? uint64_t(1) : uint64_t(ns);
}

std::string attn_ready_fault_message(const AttnReadyFault& fault, double timeout_s, const std::string& where) {
  std::ostringstream os;
  os << where << ": gathered K/V from source " << fault.source << " (epoch " << fault.epoch
     << ") never arrived within " << timeout_s << " s: ready[" << fault.source << "] never reached the epoch, so the "
     << "exchange that delivers those rows (or the kernel that raises its flag) did not complete; the call's rows that "
     << "needed them are NaN. Look at the peer's progress (a rank stopped or slower than the timeout), or raise "
     << "parallel.timeout_s";
  return os.str();
}

void check_attn_ready_flags(const AttnReadyFlags& flags, const Device& device, const char* op) {
  if (!flags.on()) return;
  RT_CHECK(flags.ready.ndim == 1 && flags.ready.shape[0] >= 1 && flags.ready.shape[0] <= kAttnReadySourcesMax,
           op << ": ready must be one i32 word per source of gathered rows (1 to " << kAttnReadySourcesMax
              << "), got " << flags.ready.shape_str());
  check_dtype(flags.ready, DType::i32, op, "ready");
  RT_CHECK(flags.ready.device == device,
           op << ": ready is on " << flags.ready.device.str() << " but q is on " << device.str());
  RT_CHECK(flags.fault.defined() && flags.fault.ndim == 1 && flags.fault.shape[0] == 2,
           op << ": the ready flags need a fault word: fault (2) i32 on q's device, zeroed once (got "
              << (flags.fault.defined() ? flags.fault.shape_str() : std::string("undefined")) << ")");
  check_dtype(flags.fault, DType::i32, op, "fault");
  RT_CHECK(flags.fault.device == device,
           op << ": fault is on " << flags.fault.device.str() << " but q is on " << device.str());
  RT_CHECK(reinterpret_cast<uintptr_t>(flags.fault.data) % 8 == 0,
           op << ": the fault word must be 8-byte aligned (the kernel writes it as one 64-bit atomic)");
  attn_ready_timeout_ns(flags.timeout_s, op);
  RT_CHECK(flags.free_sms >= 0, op << ": the ready flags' free_sms = " << flags.free_sms
                                   << " must be >= 0 (0: one CTA per unit; M > 0: M SMs left free of units)");
}

void attn_ready_fault_check(const AttnReadyFlags& flags, const std::string& where) {
  if (!flags.on()) return;
  RT_CHECK(flags.fault.defined() && flags.fault.numel() == 2 && flags.fault.dtype == DType::i32,
           where << ": attn_ready_fault_check needs the flags' fault word ((2) i32)");
  int32_t host[2] = {0, 0};  // (2) the word's low and high halves
  copy_cast(Tensor(host, DType::i32, Device::cpu(), {2}), flags.fault);  // waits for the device's work so far
  uint64_t word = 0;
  std::memcpy(&word, host, 8);
  const AttnReadyFault fault = attn_ready_fault_decode(word);
  if (!fault.set) return;
  int32_t zero[2] = {0, 0};
  copy_cast(flags.fault, Tensor(zero, DType::i32, Device::cpu(), {2}));
  RT_CHECK(false, attn_ready_fault_message(fault, flags.timeout_s, where));
}

int attn_ready_free_sms(const AttnReadyFlags& flags) {
  static const int from_env = [] {
    const char* env = std::getenv("RT_ATTN_READY_FREE_SMS");
    if (env == nullptr) return -1;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    RT_CHECK(env[0] != '\0' && *end == '\0' && v >= 0 && v <= 1024,
             "RT_ATTN_READY_FREE_SMS=" << env << " is not an integer 0 .. 1024 (the SMs the work-list forward with "
                                          "ready flags leaves free of units; 0: one CTA per unit; unset: the caller's "
                                          "AttnReadyFlags::free_sms, default " << kAttnReadyFreeSmsDefault << ")");
    return int(v);
  }();
  return from_env >= 0 ? from_env : flags.free_sms;
}

void attn_ready_release(const AttnReadyFlags& flags, int source) {
  const char* op = "attn_ready_release";
  RT_CHECK(flags.on(), op << ": the ready flags are off (no ready words)");
  RT_CHECK(flags.ready.ndim == 1 && flags.ready.dtype == DType::i32 && source >= 0 && source < flags.ready.shape[0],
           op << ": source " << source << " is not one of the ready words " << flags.ready.shape_str() << " i32");
  if (flags.ready.device.is_cuda()) {
#ifdef RINGTRAIN_HAVE_CUDA
    cuda::attn_ready_release(flags, source);
    return;
#else
    RT_CHECK(false, op << ": the ready words are on " << flags.ready.device.str() << " but this build has no CUDA");
#endif
  }
  static_cast<uint32_t*>(flags.ready.data)[source] = flags.epoch;
}

void attn_ready_load_delivery_kernels(const Device& device) {
  if (!device.is_cuda()) return;
#ifdef RINGTRAIN_HAVE_CUDA
  cuda::attn_ready_load_delivery_kernels(device.index);
#endif
}

}  // namespace rt
