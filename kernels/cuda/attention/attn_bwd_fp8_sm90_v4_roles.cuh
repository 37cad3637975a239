// FP8 attention backward v4 (attn_bwd_fp8_sm90_v4.cu has the design): its shared-memory additions, mbarriers and
// named barriers, the unit list and ring, and the two roles of warpgroup 2 beside the consumers: the producer warp
// (every TMA load) and the dQ warp (every dQ reduce-add). The tile's device pieces, the shared-memory map of the tiles
// and the Params are v3's (attn_bwd_fp8_sm90_tile.cuh), included here. Included by attn_bwd_fp8_sm90_v4.cu only:
// everything is in its anonymous namespace. Keep C++17.
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attn_bwd_fp8_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"

namespace rt {
namespace cuda {
namespace fp8bwd {
namespace {

constexpr int kV4Threads = 384;  // warpgroups 0, 1: consumers (64 keys each); 2: producer warp, dQ warp, 2 idle
constexpr int kV4ConsumerThreads = 256;
// setmaxnreg: 384 threads at 1 CTA an SM start at 168 registers; the consumers rise to what warpgroup 2 gives up.
constexpr int kV4ConsumerRegs = 240;
constexpr int kV4ProducerRegs = 24;
static_assert(kV4ConsumerRegs * 256 + kV4ProducerRegs * 128 <= 168 * kV4Threads,
              "setmaxnreg: the consumers' registers must come from warpgroup 2");

// Shared memory past v3's tiles (kSmK .. kSmDelta: K, V, Q, dO bf16; K^T, Q^T, dO^T, dS e4m3; the staging; lse,
// delta), from the same 1024-byte aligned base. Q / dO / lse / delta are loaded per 64-query half of the tile: half h
// (stage h of the ring) is rows 64h.. of each column block of Q and dO and lse[64h..], delta[64h..].
constexpr uint32_t kV4Bars = kSmDelta + kQueries * 4;  // 15 mbarriers of 8 bytes in 128 (the offsets below)
constexpr uint32_t kV4BarUnitFull = 0;     // [2] a unit published in slot s (1 arrival: the producer)
constexpr uint32_t kV4BarUnitEmpty = 16;   // [2] slot s read (9 arrivals: 8 consumer warps, the dQ warp)
constexpr uint32_t kV4BarKvFull = 32;      // K, V, K^T landed (1 arrival + bytes)
constexpr uint32_t kV4BarKvEmpty = 40;     // the unit's last MMA done (8 consumer warps)
constexpr uint32_t kV4BarQFull = 48;       // [2] half h: Q, dO, lse, delta landed (1 arrival + bytes)
constexpr uint32_t kV4BarQEmpty = 64;      // [2] half h read no more: its S, dP, probs, dS done (8 consumer warps)
constexpr uint32_t kV4BarTFull = 80;       // Q^T, dO^T landed (1 arrival + bytes)
constexpr uint32_t kV4BarTEmpty = 88;      // the dQ part-0 reduces have read the Q^T / dO^T regions (the dQ warp)
constexpr uint32_t kV4BarDkRead = 96;      // every consumer warp's dK has read Q^T (8 consumer warps)
constexpr uint32_t kV4BarStageFree = 104;  // [2] warpgroup wg's dQ part 1 read from the staging (the dQ warp)
constexpr uint32_t kV4BarBytes = 128;
constexpr uint32_t kV4Red = kV4Bars + kV4BarBytes;   // (8 consumer warps) u32 amax keys
constexpr uint32_t kV4Units = kV4Red + 32;           // (2 slots) int: the unit ring
constexpr size_t kV4SmemBytes = size_t(kV4Units) + 16 + 1024;  // + alignment slack
static_assert(kV4SmemBytes <= 232448, "attn_bwd_fp8 v4: shared memory over the sm_90 opt-in limit (227 KB)");
static_assert(kV4Bars % 8 == 0, "mbarriers need 8-byte alignment");

constexpr uint32_t kHalfTileBytes = kBf16TileBytes / 2;  // a half's Q (or dO): 2 column blocks of (64 rows, 64)
constexpr uint32_t kHalfStatBytes = kHalf * 4;           // a half's lse (or delta) f32

// Named barriers (0 is __syncthreads, unused). dQ parts: 1 + wg (part 0), 3 + wg (part 1), each over the warpgroup's
// 128 threads (bar.arrive) and the dQ warp's 32 (bar.sync): 160. The tile's two consumer meetings over 256 threads.
constexpr int kV4BarDqPart0 = 1, kV4BarDqPart1 = 3;
constexpr int kV4DqBarThreads = 128 + 32;
constexpr int kV4BarAmax = 5;    // every consumer warp's dS amax key in kV4Red
constexpr int kV4BarDsDone = 6;  // the dS tile complete; every warpgroup past dV and its staging reads

// The CTA's unit ring and barriers, as every role addresses them.
struct V4Shared {
  uint32_t base;     // the 1024-aligned shared-window base of v3's map
  uint32_t bars;     // base + kV4Bars
  int* slots;        // (2) the unit ring
  uint32_t* red;     // (8) amax keys
};

// A unit: one (128-key tile, K/V head, sample), in v3's CTA order (key tile slowest, then K/V head, then sample): the
// causal units longest first. pairs = Hkv * B.
struct V4Unit {
  int kt, hk, b, k0;
  int i_first, n_qt, n_iter;  // query tiles [i_first, i_first + n_qt) of each of the group's heads; n_iter = group n_qt
};
__device__ __forceinline__ V4Unit v4_unit(const Params& p, int pairs, int u) {
  V4Unit w;
  w.kt = u / pairs;
  const int pair = u % pairs;
  w.hk = pair % int(p.Hkv);
  w.b = pair / int(p.Hkv);
  w.k0 = w.kt * kKeys;
  int i_end;
  query_tiles_of(p, w.kt, w.i_first, i_end);
  w.n_qt = i_end - w.i_first;
  w.n_iter = int(p.group) * w.n_qt;
  return w;
}

// A reading warp's unit of fetch f (-1: none left), from the producer's 2-slot ring; lane 0 releases the slot once
// the whole warp has read it.
__device__ __forceinline__ int v4_read_unit(const V4Shared& sh, int f, int lane) {
  const uint32_t s = uint32_t(f & 1);
  mbar_wait(sh.bars + kV4BarUnitFull + 8 * s, uint32_t(f >> 1) & 1u);
  const int u = *reinterpret_cast<const volatile int*>(sh.slots + s);
  __syncwarp();
  if (lane == 0) mbar_arrive(sh.bars + kV4BarUnitEmpty + 8 * s);
  return u;
}

// The tensor maps of the loads: q, dout bf16 (D, heads, Nq, B) boxes (64 columns, 1, 64 rows, 1): one half's column
// block; k, v bf16 (D, Hkv, Nk, B) boxes (64, 1, 128, 1); qt, dot, kt e4m3 (N, D, heads, B) boxes (128, 128, 1, 1).
struct V4Maps {
  CUtensorMap q, dout, k, v;
  CUtensorMap qt, dot, kt;
};

// The producer warp (warpgroup 2, warp 0; lane 0 does the work): fetches the units (CTA c's first is c, then a
// global counter in list order) and publishes each in the ring; per unit with work, for each (query head, query
// tile): half 0's Q, dO, lse, delta into stage 0 once the previous tile's half 0 is read, K / V / K^T after the
// unit's first half 0 once the previous unit's last MMA is done, half 1 into stage 1, then Q^T and dO^T once the
// previous tile's dQ part-0 reduces have read their regions. Every wait is on the consumers' (or the dQ warp's)
// progress, in the order they consume, so the loads run up to one half ahead of the halves' S / dP.
__device__ __forceinline__ void v4_producer(const V4Maps& maps, const Params& p, const V4Shared& sh, int units,
                                            int ctas, int pairs, int* next_unit, int lane) {
  const uint32_t base = sh.base, bars = sh.bars;
  if (lane == 0) {
    tma_prefetch_desc(&maps.q);
    tma_prefetch_desc(&maps.dout);
    tma_prefetch_desc(&maps.k);
    tma_prefetch_desc(&maps.v);
    tma_prefetch_desc(&maps.qt);
    tma_prefetch_desc(&maps.dot);
    tma_prefetch_desc(&maps.kt);
  }
  uint32_t T = 0;    // tiles loaded by this CTA (all units)
  int kv_loads = 0;  // units with work loaded
  int u = int(blockIdx.x);
#pragma unroll 1
  for (int f = 0;; ++f) {
    if (lane == 0) {
      if (f >= 2) mbar_wait(bars + kV4BarUnitEmpty + 8 * uint32_t(f & 1), uint32_t((f >> 1) - 1) & 1u);
      sh.slots[f & 1] = u < units ? u : -1;
      mbar_arrive(bars + kV4BarUnitFull + 8 * uint32_t(f & 1));
    }
    if (u >= units) break;
    const V4Unit w = v4_unit(p, pairs, u);
    if (lane == 0 && w.n_iter > 0) {
#pragma unroll 1
      for (int it = 0; it < w.n_iter; ++it, ++T) {
        const int h = w.hk * int(p.group) + it / w.n_qt, q0 = (w.i_first + it % w.n_qt) * kQueries;
#pragma unroll 1
        for (int half = 0; half < 2; ++half) {
          const uint32_t full = bars + kV4BarQFull + 8 * uint32_t(half);
          if (T > 0) mbar_wait(bars + kV4BarQEmpty + 8 * uint32_t(half), (T - 1u) & 1u);
          mbar_arrive_expect_tx(full, 2 * kHalfTileBytes + 2 * kHalfStatBytes);
          const int qh = q0 + half * kHalf;
          const uint32_t rows = uint32_t(half) * kHalf * 128;  // the half's first row in each column block
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            tma_load_4d(base + kSmQ + uint32_t(c) * kBf16BlockBytes + rows, &maps.q, full, 64 * c, h, qh, w.b);
            tma_load_4d(base + kSmDo + uint32_t(c) * kBf16BlockBytes + rows, &maps.dout, full, 64 * c, h, qh, w.b);
          }
          const int64_t row = (int64_t(w.b) * p.H + h) * p.N + qh;  // (B,H,Nq) offset
          bulk_load_1d(base + kSmLse + uint32_t(half) * kHalfStatBytes, p.lse + row, kHalfStatBytes, full);
          bulk_load_1d(base + kSmDelta + uint32_t(half) * kHalfStatBytes, p.delta + row, kHalfStatBytes, full);
          if (it == 0 && half == 0) {  // K, V, K^T of the unit, once the previous unit's are read no more
            if (kv_loads > 0) mbar_wait(bars + kV4BarKvEmpty, uint32_t(kv_loads - 1) & 1u);
            const uint32_t kv = bars + kV4BarKvFull;
            mbar_arrive_expect_tx(kv, 2 * kBf16TileBytes + kFp8TileBytes);
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              tma_load_4d(base + kSmK + uint32_t(c) * kBf16BlockBytes, &maps.k, kv, 64 * c, w.hk, w.k0, w.b);
              tma_load_4d(base + kSmV + uint32_t(c) * kBf16BlockBytes, &maps.v, kv, 64 * c, w.hk, w.k0, w.b);
            }
            tma_load_4d(base + kSmKt, &maps.kt, kv, w.k0, 0, w.hk, w.b);
          }
        }
        const uint32_t tf = bars + kV4BarTFull;
        if (T > 0) mbar_wait(bars + kV4BarTEmpty, (T - 1u) & 1u);
        mbar_arrive_expect_tx(tf, 2 * kFp8TileBytes);
        tma_load_4d(base + kSmQt, &maps.qt, tf, q0, 0, h, w.b);
        tma_load_4d(base + kSmDot, &maps.dot, tf, q0, 0, h, w.b);
      }
      ++kv_loads;
    }
    int next = 0;
    if (lane == 0) {
      // Each launch makes exactly `units` fetches (one per unit past the first ctas, one per CTA that finds the list
      // empty), so the one that reads units - 1 is the last: it sets the counter back to 0 for the next launch.
      const int taken = atomicAdd(next_unit, 1);
      if (taken == units - 1) atomicExch(next_unit, 0);
      next = ctas + taken;
    }
    u = __shfl_sync(0xffffffffu, next, 0);
  }
}

// The dQ warp (warpgroup 2, warp 1): per tile, each consumer warpgroup's two dQ parts (64 queries x 64 columns f32,
// scaled, in the sw128 boxes of the dq_acc map) handed over by a named barrier, added to dq_acc by lane 0 with two
// TMA tensor reduces each; once part 0 of both warpgroups is read (their boxes lie in the dO^T / Q^T regions), the
// producer may load the next Q^T / dO^T; once a warpgroup's part 1 is read, its staging area is free again.
__device__ __forceinline__ void v4_dq_warp(const CUtensorMap* dq_map, const Params& p, const V4Shared& sh, int pairs,
                                           int lane) {
  const uint32_t base = sh.base, bars = sh.bars;
  if (lane == 0) tma_prefetch_desc(dq_map);
#pragma unroll 1
  for (int f = 0;; ++f) {
    const int u = v4_read_unit(sh, f, lane);
    if (u < 0) break;
    const V4Unit w = v4_unit(p, pairs, u);
#pragma unroll 1
    for (int it = 0; it < w.n_iter; ++it) {
      const int h = w.hk * int(p.group) + it / w.n_qt, q0 = (w.i_first + it % w.n_qt) * kQueries;
#pragma unroll 1
      for (int wg = 0; wg < 2; ++wg) {  // part 0 (columns 0..63): warpgroup 0's in dO^T, warpgroup 1's in Q^T
        named_bar_sync(kV4BarDqPart0 + wg, kV4DqBarThreads);
        if (lane == 0) {
          const uint32_t boxes = base + (wg == 0 ? kSmDot : kSmQt);
          tma_reduce_add_4d(dq_map, boxes, 0, h, q0 + wg * 64, w.b);
          tma_reduce_add_4d(dq_map, boxes + kDqPartBytes / 2, 32, h, q0 + wg * 64, w.b);
          bulk_commit();
        }
        __syncwarp();  // converged before the next bar.sync (an aligned barrier)
      }
      if (lane == 0) {
        bulk_wait_read<0>();
        mbar_arrive(bars + kV4BarTEmpty);
      }
      __syncwarp();
#pragma unroll 1
      for (int wg = 0; wg < 2; ++wg) {  // part 1 (columns 64..127): the warpgroup's half of the staging area
        named_bar_sync(kV4BarDqPart1 + wg, kV4DqBarThreads);
        if (lane == 0) {
          const uint32_t boxes = base + kSmStage + uint32_t(wg) * kDqPartBytes;
          tma_reduce_add_4d(dq_map, boxes, 64, h, q0 + wg * 64, w.b);
          tma_reduce_add_4d(dq_map, boxes + kDqPartBytes / 2, 96, h, q0 + wg * 64, w.b);
          bulk_commit();
          bulk_wait_read<0>();
          mbar_arrive(bars + kV4BarStageFree + 8 * uint32_t(wg));
        }
        __syncwarp();
      }
    }
  }
  if (lane == 0) bulk_wait<0>();  // the reduces performed before the CTA (and its shared memory) ends
}

// A consumer warpgroup's n64 dQ part x (64 queries x 64 columns, accumulator layout) times f into the 2 sw128 boxes
// at `boxes`, fenced to the async proxy and handed to the dQ warp (named barrier bar_id: these 128 threads arrive).
__device__ __forceinline__ void v4_dq_part_hand(uint32_t boxes, const float (&x)[32], float f, int bar_id, int warp,
                                                int lane) {
  wgbwd::stage_rows_f32_sw128<8>(boxes, x, f, warp, lane / 4, lane % 4);
  fence_proxy_async();  // this thread's stores, before the async proxy reads them
  named_bar_arrive(bar_id, kV4DqBarThreads);
}

}  // namespace
}  // namespace fp8bwd
}  // namespace cuda
}  // namespace rt
