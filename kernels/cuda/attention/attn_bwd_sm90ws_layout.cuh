// bwd v5's shared-memory layout, register split, named barriers and the consumer / dQ-warp handshakes
// (attn_bwd_sm90ws.cu). Included by that file only; keep C++17.
#pragma once
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"

namespace rt {
namespace cuda {
namespace wgbwd {

constexpr int kV5Threads = 384;
// setmaxnreg moves registers only within the CTA's launch allocation: 384 threads at 1 CTA per SM start with
// 168 each (65536 / 384 rounded down to a multiple of 8), so the consumers can rise only by what the producer
// warpgroup gives up (an inc beyond that blocks forever: 240 / 32 deadlocked on the first device run).
// Persistent (unit loop in every role), per D (ptxas -v, nvcc 13):
//   * D = 128: 240 / 24. At 232 / 40 ptxas serializes the wgmmas for want of registers (C7512), which costs the
//     backward far more (bench/NOTES.md) than 240 / 24's spill of about 130 bytes in the producer warpgroup's loops;
//   * D = 64: 232 / 40, 4 bytes of spill (240 / 24 spills about 180 bytes in the producer warpgroup).
template <int D>
constexpr int kV5ConsumerRegs = D == 128 ? 240 : 232;
template <int D>
constexpr int kV5ProducerRegs = D == 128 ? 24 : 40;
static_assert(kV5ConsumerRegs<128> * 256 + kV5ProducerRegs<128> * 128 <= 168 * kV5Threads &&
                  kV5ConsumerRegs<64> * 256 + kV5ProducerRegs<64> * 128 <= 168 * kV5Threads,
              "setmaxnreg: the consumers' registers must come from the producer warpgroup");
// Named barriers (attn_sm90_tma_ops.cuh; 0 is __syncthreads).
constexpr int kBarDs = 1;        // D = 128: dS^T of both consumer warpgroups stored (256 threads)
constexpr int kBarDsWg = 2;      // D = 64: 2 + wg, dS^T of one consumer warpgroup stored (128 threads)
// Each consumer warpgroup stages its own part of a dQ tile (blocks 2wg, 2wg + 1 of a buffer: at D = 64 its partial
// over its own keys, at D = 128 its half of the columns over all 128 keys), so each has its own full / empty pair
// per buffer with the dQ warp, and neither waits there for the other. At D = 64 only the 2-stage Q / dO ring bounds
// how far apart they drift (one tile), so one warpgroup's exps run under the other's MMAs; at D = 128 they still
// meet at the dS^T barrier (each dQ half reads all 128 keys' dS^T), and the dQ warp reduces a half as soon as it
// is staged.
constexpr int kBarDqFullWg = 8;    // 8 + 2 wg + buffer (128 + the dQ warp's 32)
constexpr int kBarDqEmptyWg = 12;  // 12 + 2 wg + buffer
constexpr int kDqWgBarThreads = 128 + 32;
// How the consumers release a Q / dO stage and K / V: at D = 128 one arrival per warp (mbar_arrive_warp: +5% on the
// d128 16K causal backward in one job, no difference in the next; kept as the build measured beside FA4), at D = 64
// one per thread (per warp measured 1-2% slower there). bench/NOTES.md "Mbarrier releases one arrival per warp".
template <int D>
constexpr bool kV5WarpRelease = D == 128;
template <int D>
constexpr int kV5ReleaseArrivals = kV5WarpRelease<D> ? 8 : 256;  // the 2 consumer warpgroups' warps or threads
template <int D>
__device__ __forceinline__ void release_to_producer(uint32_t bar) {
  if constexpr (kV5WarpRelease<D>) mbar_arrive_warp(bar);
  else mbar_arrive(bar);
}
constexpr int kUnitReaders = 8 + 1;  // the consumer warps and the dQ warp release a unit-ring slot

// Query rows per tile: 128 at D = 64 without documents or turn counters (FA4's tile there: S^T / dP^T as m64n128
// wgmmas, and dQ split by queries between the warpgroups, so one dQ tile per 128 x 128 pair instead of two partials
// per 64 x 128), else 64. Documents keep 64 (their summary tiles are 64 rows), and so do the deterministic turn
// counters (one per 64-row query tile, shared with v4 and the mma.sync kernels).
template <int D>
constexpr int kV5WideRows = D == 64 ? 128 : kBr;

template <int D, int R = kBr>
struct WgBwdV5Smem {
  static constexpr uint32_t kKVBytes = kBc * D * 2;
  static constexpr uint32_t kQBytes = R * D * 2;
  static constexpr uint32_t kDsBytes = kBc * R * 2;
  // dS^T stages: 2 at 64 rows (the loop then needs no barrier to reuse one); 1 at 128 rows (32 KB each), where both
  // warpgroups pass a barrier before overwriting it (each has waited for its dQ MMA by then).
  static constexpr uint32_t kDsStages = R == 128 ? 1 : 2;
  // dQ staging, f32, 2 buffers of (4 column blocks, 64 queries, 32) in the 128-byte swizzle of the dq_acc
  // tensor map (16-byte chunk c of row r at c ^ (r & 7): a warp's float2 stores of 8 rows x 32 bytes hit
  // every bank twice, the minimum for 256 bytes). D = 128: blocks = columns 0-31 .. 96-127 of the tile;
  // D = 64: blocks 2w, 2w + 1 = columns 0-31, 32-63 of warpgroup w's partial (over its own 64 keys).
  static constexpr uint32_t kDqBlockBytes = kBr * 128;  // 64 rows x 32 f32 (128 queries: 2 blocks per warpgroup)
  static constexpr uint32_t kDqBufBytes = 4 * kDqBlockBytes;
  static constexpr uint32_t kK = 0;
  static constexpr uint32_t kV = kK + kKVBytes;
  static constexpr uint32_t kQ = kV + kKVBytes;       // (2 stages, R, D)
  static constexpr uint32_t kDo = kQ + 2 * kQBytes;   // (2 stages, R, D)
  static constexpr uint32_t kDs = kDo + 2 * kQBytes;  // (kDsStages, 128 keys, R queries)
  static constexpr uint32_t kDq = kDs + kDsStages * kDsBytes;  // (2 buffers, 4, 64, 32) f32 sw128
  static constexpr uint32_t kStats = kDq + 2 * kDqBufBytes;    // lse (2, R), delta (2, R) f32
  static constexpr uint32_t kBars = kStats + 4 * R * 4;  // full[2], empty[2], kv, kv_empty, unit_full[2],
                                                           // unit_empty[2] mbarriers
  static constexpr uint32_t kUnits = kBars + 10 * 8;       // the unit ring's 2 slots (int)
  static constexpr size_t kBytes = size_t(kUnits) + 8 + 1024;  // + alignment slack
  // The document-mask instantiation only (attn_bwd_sm90ws_docs.cuh), past the regions above:
  static constexpr uint32_t kDocRows = kUnits + 16;               // (2 stages, 64 rows) u32: doc | pos << 16
  static constexpr uint32_t kDocInfo = kDocRows + 2 * R * 4;      // (2 stages) int4: class bits, q0, k0, b
  static constexpr uint32_t kDocSpans = kDocInfo + 2 * 16;        // (2 unit-ring slots) int2: the unit's span
  static constexpr size_t kBytesDocs = size_t(kDocSpans) + 2 * 8 + 1024;  // + alignment slack
  // The epilogue stages the CTA's f32 dK and dV 64 columns at a time in the dQ buffers: (2 warpgroups, 2 column
  // blocks, 64 keys, 32), in the sw128 layout of the dk / dv tensor maps.
  static_assert(kDqBufBytes == kBc * 64 * 4, "bwd v5: a dQ buffer must hold 128 keys x 64 columns f32");
  static_assert(kBytes <= 232448 && kBytesDocs <= 232448,
                "bwd v5: shared memory over the 227 KB an H100 / H200 block may use");
};

// dQ buffer `sb` (0 or 1) handshakes between consumer warpgroup wg's 128 threads and the dQ warp (kBarDqFullWg,
// kBarDqEmptyWg). The barrier id is a register: with immediate ids (a switch over wg and sb) ptxas branched to one
// of four bar instructions per handshake, which cost 5 spilled loads per tile in the D = 128 loop.
template <bool kSync>
__device__ __forceinline__ void dq_bar(int id, int threads) {
  if (kSync) named_bar_sync(id, threads);
  else named_bar_arrive(id, threads);
}
template <bool kSync>
__device__ __forceinline__ void dq_bar_empty(int sb, int wg) {
  dq_bar<kSync>(kBarDqEmptyWg + 2 * wg + sb, kDqWgBarThreads);
}
template <bool kSync>
__device__ __forceinline__ void dq_bar_full(int sb, int wg) {
  dq_bar<kSync>(kBarDqFullWg + 2 * wg + sb, kDqWgBarThreads);
}
// Consumers: wait until the dQ warp has read warpgroup wg's part of buffer sb; announce it staged.
__device__ __forceinline__ void dq_buffer_sync_empty(int sb, int wg) { dq_bar_empty<true>(sb, wg); }
__device__ __forceinline__ void dq_buffer_arrive_full(int sb, int wg) { dq_bar_full<false>(sb, wg); }
// The dQ warp: free warpgroup wg's part of buffer sb; wait until it is staged.
__device__ __forceinline__ void dq_buffer_arrive_empty(int sb, int wg) { dq_bar_empty<false>(sb, wg); }
__device__ __forceinline__ void dq_buffer_sync_full(int sb, int wg) { dq_bar_full<true>(sb, wg); }
// The consumer warpgroups that stage into one buffer, each on its own barriers (part w = warpgroup w's blocks).
constexpr int kDqParts = 2;

// The epilogue as 2 x D / 64 more tiles of the dQ ring: tile c (c < D / 64) holds dK * scale columns
// [64c, 64c + 64) of the CTA's 128 keys, tile D / 64 + c the same columns of dV; warpgroup w stages its 64 keys in
// blocks 2w, 2w + 1 (as its dQ half), and the dQ warp writes the 4 boxes to dk / dv (kEpilogueTiles, below).
template <int D, int C>
__device__ __forceinline__ void stage_dkv_tile(const float (&x)[D / 2], float scale, uint32_t dq_bufs, uint32_t& jq,
                                               int wg, int warp, int g, int t) {
  const int sb = int(jq & 1u);
  dq_buffer_sync_empty(sb, wg);
  stage_rows_f32_sw128<8, 32 * C>(dq_bufs + uint32_t(sb) * WgBwdV5Smem<D>::kDqBufBytes +
                                      uint32_t(2 * wg) * WgBwdV5Smem<D>::kDqBlockBytes,
                                  x, scale, warp, g, t);
  fence_proxy_async_smem();  // the dQ warp's TMA reads the buffer through the async proxy
  dq_buffer_arrive_full(sb, wg);
  ++jq;
}

// The end of a tile in both consumers' loops: dQ * scale (this warpgroup's 64 rows x 64 columns, blocks 2wg, 2wg + 1
// of buffer jq & 1) staged while dK runs, then the dK wait and the handoffs: the buffer to the dQ warp, the Q / dO
// stage (its empty mbarrier) to the producer. The proxy fence comes after the dK wait: right after the stores it
// stalled on them (ncu).
template <int D, int NDF>
__device__ __forceinline__ void stage_dq_end_tile(const float (&dq)[32], float (&dk)[D / 2], uint32_t (&df)[NDF],
                                                  float scale, uint32_t dq_bufs, uint32_t jq, uint32_t stage_empty,
                                                  int wg, int warp, int g, int t) {
  const int sb = int(jq & 1u);
  dq_buffer_sync_empty(sb, wg);
  stage_rows_f32_sw128<8>(dq_bufs + uint32_t(sb) * WgBwdV5Smem<D>::kDqBufBytes +
                              uint32_t(2 * wg) * WgBwdV5Smem<D>::kDqBlockBytes,
                          dq, scale, warp, g, t);
  wgmma_wait<0>();  // dK done (it ran during the staging)
  wgmma_fence_regs(dk);
  fence_regs_u32(df);
  fence_proxy_async_smem();  // the tensor reduces read the buffer through the async proxy
  dq_buffer_arrive_full(sb, wg);
  release_to_producer<D>(stage_empty);  // this tile's Q / dO are no longer read
}

// The shared-memory regions and mbarriers of bwd v5, as every role addresses them.
struct BwdV5Shared {
  uint32_t k_tile, v_tile;                 // (128, D) bf16 sw128 each
  uint32_t q_tiles, do_tiles;              // (2 stages, 64, D) bf16 sw128 each
  uint32_t ds_tiles;                       // (2 stages, 128 keys, 64 queries) bf16 sw128, dS^T
  uint32_t dq_bufs;                        // (2 buffers, 4, 64, 32) f32 sw128: dQ, then the epilogue's dK / dV
  float* lse_s;                            // (2 stages, 64) f32
  float* delta_s;                          // (2 stages, 64) f32
  int* unit_slots;                         // (2) the unit ring
  uint32_t full_bar, empty_bar;            // Q / dO stages, 2 x 8 bytes each
  uint32_t kv_bar, kv_empty_bar;           // K and V landed / the consumers read them no more (kV5ReleaseArrivals)
  uint32_t unit_full_bar, unit_empty_bar;  // the unit ring, 2 x 8 bytes each
};

}  // namespace wgbwd
}  // namespace cuda
}  // namespace rt
