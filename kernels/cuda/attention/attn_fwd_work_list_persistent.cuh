// The work-list forward's persistent form (issue 46; kernels/attn_ready_flags.h "Deadlock"): fwd v5's list mode with
// ready flags (attn_fwd_ws_kernel<D, true, 2, true, true>'s unit code, the same role fragments) on fewer CTAs than
// units, so that the gathered rows' delivery finds SMs while units wait for them.
//   * Grid: min(units, (SMs - M) x CTAs per SM) CTAs, M = AttnReadyFlags::free_sms > 0 (the host side in
//     attn_fwd_work_list.cu); units = H x T (task, head) units, then the fill CTAs' work, numbered as the CTAs of the
//     one-CTA-per-unit grid (work_list_unit's d). The list kernel takes a whole SM per CTA (shared memory and
//     registers), so M SMs hold none of its CTAs: NCCL's kernel, the unpack and the flag kernel run there.
//   * Order: CTA c runs unit c first, then fetches the next from a per-device counter (atomicAdd), so the units start
//     in list order as on the one-CTA-per-unit grid (the hardware dispatches CTAs in blockIdx order as SMs free up):
//     the own-first list's own units all start before any gathered one, and a waiting unit never keeps a unit before
//     it from starting. A static stride (unit c + k x CTAs) needs no counter but starts units round by round per
//     CTA: a CTA done early runs a later (gathered, waiting) unit while an earlier own unit still queues behind a slow
//     CTA. Thread 0 fetches once its producer loop has issued the unit's last load (under the consumers' last tiles,
//     so the atomic's latency hides; with flags that is after the unit's wait), into shared memory that every thread
//     reads after the unit's closing block barrier. Each launch makes exactly `units` fetches (one per unit past the
//     first CTAs, one per CTA that finds none left): the fetch that reads units - 1 sets the counter back to 0, so no
//     memset per launch (one launch at a time per device, as bwd v5's counter).
//   * Per unit, every thread: work_list_unit (a fill unit is done there), thread 0 initializes the mbarriers and
//     issues Q (work_list_unit_start), the segments' expansion (block barriers publish both), the role fragment (the
//     producer warpgroup's or a consumer warpgroup's, attn_fwd_sm90ws_producer.inc / _consumer.inc, as in fwd v5),
//     then a block barrier (every load of the unit was consumed: the consumers waited on each full barrier) after
//     which thread 0 invalidates the mbarriers for the next unit's initialization (phases restart at 0, so the
//     fragments run unchanged). setmaxnreg runs once per role, before its loop (kPersistent in the fragments).
//   * No allow_dependent_launch: a kernel launched after it with PDL would take the M free SMs and wait there in its
//     grid_dependency_wait (the dependent launch comes at the kernel's end instead).
// The math per unit is the one-CTA-per-unit kernel's (the same fragments on the same tiles in the same order), so the
// bits equal attn_fwd_work_list's without flags once the flags have passed. Included by attn_fwd_work_list.cu only;
// keep C++17.
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attn_fwd_sm90ws_kernel.cuh"

namespace rt {
namespace cuda {
namespace {

struct WsPersistent {
  int units = 0;             // the one-CTA-per-unit grid's CTAs: H x T units, then the fill CTAs
  int ctas = 0;              // CTAs launched (<= units): CTA c runs unit c first
  int* next_unit = nullptr;  // the per-device fetch counter, 0 between launches
};

__device__ __forceinline__ void mbar_inval(uint32_t bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ int& persistent_next_unit() {
  __shared__ int next;  // the CTA's next unit (thread 0 writes it, every thread reads it after the unit's barrier)
  return next;
}

// Thread 0: takes the next unit (see above).
__device__ __forceinline__ void persistent_fetch(const WsPersistent& ps) {
  const int taken = atomicAdd(ps.next_unit, 1);
  if (taken == ps.units - 1) atomicExch(ps.next_unit, 0);
  persistent_next_unit() = ps.ctas + taken;
}

// Every thread, after its part of a unit: the closing barrier, then thread 0 invalidates the unit's mbarriers (if it
// initialized them: not for a fill unit). Returns the CTA's next unit.
template <int kStages>
__device__ __forceinline__ int persistent_unit_end(const WsBars<kStages>& bars, bool initialized) {
  __syncthreads();
  const int next = persistent_next_unit();
  if (threadIdx.x == 0 && initialized) {
    mbar_inval(bars.q_full());
    for (int s = 0; s < kStages; ++s) {
      mbar_inval(bars.k_full(s));
      mbar_inval(bars.v_full(s));
      mbar_inval(bars.k_empty(s));
      mbar_inval(bars.v_empty(s));
    }
    mbar_inval(work_list_ready_bar());
  }
  return next;
}

template <int D>
__global__ void __launch_bounds__(kWsThreads<2>, kWsCtasPerSm<2>)
    attn_fwd_ws_list_persistent_kernel(const __grid_constant__ CUtensorMap tm_q,
                                       const __grid_constant__ CUtensorMap tm_k,
                                       const __grid_constant__ CUtensorMap tm_v,
                                       const __grid_constant__ CUtensorMap tm_k2,
                                       const __grid_constant__ CUtensorMap tm_v2, const AttnFwdParams p,
                                       int num_q_tiles, int head_window, const WsWorkList wl, const WsPersistent ps) {
#if RT_WGMMA_AVAILABLE
  constexpr int kCons = 2;  // 128 query rows per CTA, as the list mode
  constexpr bool kDocs = true, kList = true, kFlags = true, kPersistent = true;
  constexpr int kRows = 64 * kCons;
  constexpr int kStages = kWsStages<D, kCons>;
  using Smem = WsSmem<D, kRows, kStages>;
  constexpr int kBc = kWgKeysPerTile;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const WsBars<kStages> bars{base};
  // (kStages, 128) u32: the low word of each key's position of the stage's tile (key_positions_warp).
  uint32_t* key_pos = reinterpret_cast<uint32_t*>(smem_raw + (base - smem_addr(smem_raw)) + Smem::kBarBytes);
  const uint32_t q_tile = base + Smem::kBarBytes + Smem::kKeyPosBytes;  // (kRows, D) bf16 sw128
  const uint32_t k_tiles = q_tile + Smem::kQBytes;                      // (kStages, 128, D) bf16 sw128
  const uint32_t v_tiles = k_tiles + kStages * Smem::kKVBytes;          // (kStages, 128, D) bf16 sw128
  grid_dependency_wait();  // launched as a dependent kernel (pdl.cuh): no global access before this

  // One unit's set-up, every thread: false for a fill unit (done inside, its rows written by the consumer warpgroups:
  // fill_tid, -1 in the producer warpgroup). The unit's tiles in `n_tiles`.
  auto begin = [&](int d, WorkListUnit& unit, int& n_tiles, int fill_tid) {
    if (!work_list_unit<D, true>(p, wl, num_q_tiles, head_window, int64_t(d), unit, fill_tid, 128 * kCons))
      return false;
    if (threadIdx.x == 0) work_list_unit_start<D, kCons, kRows, kStages, kFlags>(bars, &tm_q, q_tile, unit);
    n_tiles = __shfl_sync(0xffffffffu, work_list_tiles<kWsThreads<kCons>>(p, wl, unit, work_list_scratch()), 0);
    return true;
  };
  const unsigned short* const live = work_list_scratch().tiles;  // the unit's key tiles (the kernel's `live`)
  const int64_t k_lo = p.k_begin, k_hi = p.k_end;
  auto key_tile = [&](int j) { return k_lo + int64_t(live[j]) * kBc; };

  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 0) {
    // ---- producer warpgroup ----
    setmaxnreg_dec<kWsProducerRegs>();
    for (int unit_d = int(blockIdx.x); unit_d < ps.units;) {
      WorkListUnit unit{};
      int n_tiles = 0;
      const bool run = begin(unit_d, unit, n_tiles, -1);
      if (run) {
        const int64_t h = unit.h, b = unit.b;
        const int64_t q0 = p.q_begin + int64_t(unit.tile) * kRows;
#include "kernels/cuda/attention/attn_fwd_sm90ws_producer.inc"
      }
      if (threadIdx.x == 0) persistent_fetch(ps);  // after the unit's last load (or its fill work)
      unit_d = persistent_unit_end(bars, run);
    }
    return;
  }
  // ---- consumer warpgroups ----
  setmaxnreg_inc<kWsConsumerRegs<kCons>>();
  for (int unit_d = int(blockIdx.x); unit_d < ps.units;) {
    WorkListUnit unit{};
    int n_tiles = 0;
    const bool run = begin(unit_d, unit, n_tiles, int(threadIdx.x) - 128);
    if (run) {
      const int64_t h = unit.h, b = unit.b;
      const int64_t q0 = p.q_begin + int64_t(unit.tile) * kRows;
#include "kernels/cuda/attention/attn_fwd_sm90ws_consumer.inc"
    }
    unit_d = persistent_unit_end(bars, run);
  }
#else
  // Built without an sm_90a image: attn_fwd_ws_supported() refuses such binaries, so this never runs.
  __trap();
#endif
}

}  // namespace
}  // namespace cuda
}  // namespace rt
