// fwd v5's list mode with ready flags (attn_fwd_ws_kernel<D, true, 2, true, true>; the protocol in
// kernels/attn_ready_flags.h): the device pieces of the wait for gathered K/V and of its watchdog. Per unit CTA:
//   * thread 0 initializes `bar` (1 arrival) and `aborted` = 0 in the prologue, with the other mbarriers, before the
//     segments' expansion whose block barriers publish them;
//   * warp 2 of the producer warpgroup (idle in fwd v5 otherwise) is the waiter: if the unit visits a gathered tile it
//     collects the sources its segments name, then lane 0 waits for ready[s] == epoch of each in turn (ld.acquire.gpu,
//     __nanosleep backoff 32 .. 1024 ns) under the watchdog, sets `aborted` if it gave up, and arrives on `bar`
//     (release, CTA scope). A unit with no gathered tile never waits and never arrives;
//   * the producer thread, before its first load of a gathered tile, waits on `bar` (acquire) and then fences the
//     async proxy (fence.proxy.async.global), so its TMA loads see the rows the flag published. It never spins on
//     global memory itself: the spin's registers stay out of the loads' loop (the warpgroup has 24 registers);
//   * the consumers, after their key loop, turn their state into NaN when `aborted` is set (they read it after
//     waiting for the first gathered tile's K, which the producer issued after its wait on `bar`, so the flag is
//     visible): out NaN (lse +inf) for an unsplit task, and a split part's stored state NaN, so its tile's merge is.
// The watchdog: the waiter gives up after timeout_ns from its first poll (%globaltimer), writing
// attn_ready_fault_word(epoch, s) into the fault word with atomicMax, or at once when the fault word already holds
// this call's epoch (another unit gave up). After giving up the producer still loads the remaining tiles (whatever
// the gathered buffer holds: finite work, memory the caller owns), so the pipeline drains and no barrier waits
// forever. Included by attn_fwd_sm90ws_kernel.cuh; keep C++17.
#pragma once
#include <cstdint>

#include "kernels/attn_ready_flags.h"
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_fwd_work_list.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"

namespace rt {
namespace cuda {
namespace {

struct WorkListReadyScratch {  // shared memory, one per CTA of the flags instantiation
  unsigned long long bar;      // mbarrier: the waiter's one arrival once the unit's sources are in (or given up)
  int aborted;                 // 1: the waiter gave up (the watchdog); the consumers write NaN
};

__device__ __forceinline__ WorkListReadyScratch& work_list_ready_scratch() {
  __shared__ __align__(8) WorkListReadyScratch s;
  return s;
}

__device__ __forceinline__ uint32_t work_list_ready_bar() { return smem_addr(&work_list_ready_scratch().bar); }

// Thread 0, in the prologue (before the block barrier that publishes the mbarriers).
__device__ __forceinline__ void work_list_ready_init() {
  mbar_init(work_list_ready_bar(), 1);
  work_list_ready_scratch().aborted = 0;
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long ld_relaxed_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Waits for ready[s] == epoch; false when it gave up (the watchdog, or another unit's fault for this epoch).
__device__ __forceinline__ bool work_list_wait_ready(const WsWorkList& wl, int s) {
  const unsigned* flag = wl.ready + s;
  if (ld_acquire_gpu(flag) == wl.epoch) return true;
  const unsigned long long deadline = global_timer_ns() + wl.timeout_ns;
  unsigned sleep_ns = 32;
  for (;;) {
    __nanosleep(sleep_ns);
    sleep_ns = min(2u * sleep_ns, 1024u);
    if (ld_acquire_gpu(flag) == wl.epoch) return true;
    const unsigned long long f = ld_relaxed_gpu(wl.fault);
    if (f != 0ull && unsigned(f >> 32) == wl.epoch) return false;  // this call has failed already
    if (global_timer_ns() > deadline) {
      atomicMax(wl.fault, static_cast<unsigned long long>(attn_ready_fault_word(wl.epoch, s)));
      return false;
    }
  }
}

// The waiter, warp 2 of the producer warpgroup (every lane calls it). `gathered`: the unit visits a gathered tile
// (its last tile, the greatest, is at or past k2_row).
__device__ __forceinline__ void work_list_ready_warp(const WsWorkList& wl, const WorkListUnit& u, bool gathered,
                                                     int lane) {
  if (!gathered) return;  // the producer never waits on the barrier
  const int32_t* segw = wl.words + wl.segs_at() + 2 * int64_t(u.first_seg);  // (segs, 2) i32
  unsigned sources = 0u;  // bit s: a segment names source s
  for (int i = lane; i < u.segs; i += 32) {
    const int src = int8_t((__ldg(segw + 2 * i + 1) >> 16) & 0xff);
    if (src >= 0) sources |= 1u << (src & 31);
  }
  sources = __reduce_or_sync(0xffffffffu, sources);
  if (lane != 0) return;
  if (wl.n_ready < 32 && (sources >> wl.n_ready) != 0u)
    work_list_fault("a segment names a source without a ready word", -1, sources);
  bool gave_up = false;
  while (sources != 0u && !gave_up) {
    const int s = __ffs(int(sources)) - 1;
    sources &= sources - 1u;
    gave_up = !work_list_wait_ready(wl, s);
  }
  if (gave_up) work_list_ready_scratch().aborted = 1;
  mbar_arrive(work_list_ready_bar());  // release: `aborted` before the producer's wait returns
}

// The producer thread, before its first load of a gathered tile.
__device__ __forceinline__ void work_list_ready_acquire() {
  mbar_wait(work_list_ready_bar(), 0);
  fence_proxy_async_global();  // the rows the flag published, for the TMA loads that follow
}

// A consumer thread after its key loop: NaN state when the unit gave up (out NaN, lse +inf when finalized; a split
// part's NaN O and m = +inf make its tile's merged out NaN, attn_fwd_work_list_split.cuh).
template <int D>
__device__ __forceinline__ void work_list_ready_poison(float (&m_run)[2], float (&l_run)[2], float (&o)[D / 2]) {
  if (!work_list_ready_scratch().aborted) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) m_run[r] = __int_as_float(0x7f800000), l_run[r] = 1.f;
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = __int_as_float(0x7fc00000);
}

}  // namespace
}  // namespace cuda
}  // namespace rt
