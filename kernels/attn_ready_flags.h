// Ready flags of a work-list forward over gathered keys (issue 46; bench/NOTES.md "Packed documents at cp = 8, one
// persistent launch per rank and direction", "Ready flags" and "Wait"): attn_fwd_work_list may be launched before the
// K/V exchange that fills its gathered rows (k2, v2) has landed, so that its own keys run under the exchange.
//
// The protocol, per call:
//   * ready (sources) u32 words on q's device, one per source of gathered rows (a list segment's `source` s >= 0
//     names word s; the lists have source 0 only today: one exchange delivers every gathered row at once). Whoever
//     delivers source s's rows writes the call's epoch into ready[s] after the rows, with release semantics at GPU
//     scope (a kernel's st.release.gpu after its stores, or a copy on a stream followed by a 1-thread flag kernel or a
//     cudaMemcpyAsync of the epoch on the same stream). Epochs increase from call to call (a layer's index since the
//     step's set_documents, say), so a word left from an earlier call never passes and nothing is reset.
//   * The CUDA kernel's unit whose segments name a gathered tile waits, before that tile's first K/V load, until
//     ready[s] == epoch for every source s its segments name (own tiles, source -1, never wait, and the list orders them
//     first in a task, so they run under the exchange). The wait spins with ld.acquire.gpu and __nanosleep backoff,
//     then a proxy fence makes the rows visible to its TMA loads.
//   * The watchdog: a unit that waits longer than timeout_s (from %globaltimer, per unit) gives up: it writes
//     attn_ready_fault_word(epoch, s) into `fault` with an atomic max (the latest epoch's fault wins; the word is
//     zero until a fault), stops waiting, and writes NaN into every row of its task for its head (out and lse; a split
//     part's state is NaN, so its tile's merged rows are NaN too). A unit that finds the fault word holding this
//     call's epoch gives up at once, so a call whose flag never comes ends one timeout after its first wait, not one
//     per wave. Units whose tasks read no gathered tile are not affected. No hang, no trap: the CUDA context stays
//     usable.
//   * How the caller learns of it: the kernel cannot raise, and reading the fault word needs a host wait, so it is
//     read only where the caller already waits: attn_ready_fault_check below (a device-to-host copy: the stream's
//     work up to here has completed) raises the error naming the source, the epoch and the caller's `where` (rank and
//     layer) and clears the word. The choice for the gather path (RingAttention, not wired yet): one check per step at
//     its existing host wait (the loss's read-back), naming the rank and the first layer whose epoch faulted (the word
//     holds the epoch); RT_ATTN_WORK_LIST_CHECK=1 makes the op itself wait after every launch and check, for
//     debugging. A fault is never lost: the word keeps the latest until a check clears it, and the NaN rows poison
//     the loss in between.
//   * Deadlock: a waiting unit holds its SM. Whatever raises the flag must not need an SM the waiting units hold: a
//     copy engine (cudaMemcpyAsync of the epoch after the rows), or kernels on SMs left free. free_sms = M > 0 (the
//     default, kAttnReadyFreeSmsDefault) runs the kernel's persistent form: min(units, (SMs - M) x CTAs per SM) CTAs
//     that take the units in list order from a counter (attn_fwd_work_list_persistent.cuh), so M SMs hold no unit
//     and the exchange's kernels (NCCL), the unpack (gather_rows) and the flag kernel run there while units wait;
//     the same bits as one CTA per unit. M = 0: one CTA per unit (the grid without flags), whose waiting units may
//     hold every SM; then only a copy engine can deliver, and otherwise the watchdog ends the call with the fault,
//     not a hang.
// The CPU op ignores the flags: on CPU ranks the caller's cp_.wait has ordered the gathered rows before the call.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/tensor.h"

namespace rt {

// The default M: the gather exchange's NCCL kernel (one CTA per channel it runs: up to 8 for the exchange's few peers
// on one NVLink node with NCCL's defaults, NCCL_MAX_NCHANNELS caps it), the unpack (gather_rows, a grid-stride copy
// that makes progress on any number of SMs) and the 1-thread flag kernel must find SMs while every other SM may hold
// a waiting unit: 8 of the H200's 132 (6% of the forward's SMs while nothing waits; the units that would run there
// are the ones that wait anyway when the rows are late).
constexpr int kAttnReadyFreeSmsDefault = 8;

struct AttnReadyFlags {
  Tensor ready;           // (sources) i32 on q's device, read as u32: source s's rows are in once ready[s] == epoch
  uint32_t epoch = 0;     // this call's exchange
  double timeout_s = 0;   // the watchdog's limit per wait, > 0 (parallel.timeout_s in a run)
  Tensor fault;           // (2) i32 on q's device, 8-byte aligned, zero when allocated: attn_ready_fault_word's
                          // low and high words (little-endian) of the latest fault, zero while none
  int free_sms = kAttnReadyFreeSmsDefault;  // M: SMs the kernel leaves free of units for whatever delivers the
                                            // rows (the persistent form); 0: one CTA per unit
  bool on() const { return ready.defined(); }
};

constexpr int kAttnReadySourcesMax = 32;  // ready words (sources) at most: a unit's sources are one u32 bit mask

// The fault word of a wait for source `source` in the call of epoch `epoch` that timed out: the epoch in the high 32
// bits, source + 1 in the low (never zero). The CUDA kernel writes it with atomicMax, so the latest epoch wins.
constexpr uint64_t attn_ready_fault_word(uint32_t epoch, int source) {
  return (uint64_t(epoch) << 32) | uint64_t(uint32_t(source + 1));
}

struct AttnReadyFault {
  bool set = false;
  uint32_t epoch = 0;
  int source = -1;
};
// The fault word's meaning (zero: no fault).
AttnReadyFault attn_ready_fault_decode(uint64_t word);
// The watchdog's limit in nanoseconds, as the kernel takes it; refuses timeout_s <= 0 or not finite, naming `op`.
uint64_t attn_ready_timeout_ns(double timeout_s, const char* op);
// The error's text: "<where>: gathered K/V from source s (epoch e) never arrived within T s ...".
std::string attn_ready_fault_message(const AttnReadyFault& fault, double timeout_s, const std::string& where);
// attn_fwd_work_list's checks of the flags against q's device (ready: 1-D i32, 1 to kAttnReadySourcesMax words;
// fault: 2 i32 words, 8-byte aligned; timeout_s > 0). Used by the CUDA op.
void check_attn_ready_flags(const AttnReadyFlags& flags, const Device& device, const char* op);
// Reads the fault word (a host wait on the device's work up to here) and, if a wait timed out, clears it and raises
// attn_ready_fault_message(..., where). Does nothing when the flags are off.
void attn_ready_fault_check(const AttnReadyFlags& flags, const std::string& where);
// The M the CUDA op runs with: RT_ATTN_READY_FREE_SMS (an integer >= 0, read once; other values refused, naming
// the variable) overrides flags.free_sms for every call, so that a run or a benchmark can compare M = 0 (one CTA per
// unit), the default and other M without a rebuild; unset: flags.free_sms.
int attn_ready_free_sms(const AttnReadyFlags& flags);
// Raises ready[source] to flags.epoch after the work queued before it on the current stream: on CUDA a 1-thread
// kernel's st.release.gpu (kernels/cuda/attention/attn_ready_release.cu), so that the rows that work wrote are
// visible to the units that wait for the word; on the host a plain store (the caller's order is the program's).
// Refuses flags that are off or a source outside the ready words.
void attn_ready_release(const AttnReadyFlags& flags, int source = 0);

}  // namespace rt
