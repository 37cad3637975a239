// fwd v5's layout (kernels/cuda/attention/attn_fwd_sm90ws.cu): the warpgroups and their register split, the K/V ring's
// stages, the shared-memory layout and its mbarriers, and the TMA tile load the producer uses. Included by the fwd v5
// files only (attn_fwd_sm90ws.cu and the list mode's attn_fwd_work_list.cu: its names stay in each unit's anonymous
// namespace); keep C++17.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgKeysPerTile (128)

// Consumer warpgroups per CTA (64 query rows each): 3 (192 rows, FA4's tile at D = 64: a third warpgroup to
// interleave with, at the same MMA per exp) only at D = 64 without documents (fwd_ws_rows_for), else 2 or 1: at D = 128
// the accumulator and the scores take 128 of a thread's registers, more than a third warpgroup would leave, and
// the document kernel's per-row state does not fit 160 registers.
template <int kCons>
constexpr int kWsThreads = 128 * (kCons + 1);  // producer warpgroup + the consumers
constexpr int kWsProducerRegs = 24;
// kCons = 1 (64-row tiles: D = 64 calls under 4K query rows, or forced; bench/NOTES.md "fwd v5: 64-query tiles")
// runs two CTAs per SM: 2 x (24 + 232) x 128 registers = 64K.
template <int kCons>
constexpr int kWsConsumerRegs = kCons == 3 ? 160 : kCons == 2 ? 240 : 232;  // 24 * 128 + 160 * 384 <= 64K, etc.
template <int kCons>
constexpr int kWsCtasPerSm = kCons == 1 ? 2 : 1;
// K/V ring stages: 2 (D = 128: 32 + 4 x 32 KB of shared memory; D = 64: 24 + 4 x 16 KB); 3 measured no faster
// (dev/attention/README.md). 64-row tiles at D = 128 take 1, so that two CTAs fit an SM (2 x 82 KB).
template <int D, int kCons>
constexpr int kWsStages = (kCons == 1 && D == 128) ? 1 : 2;
// The empty barriers count every consumer thread (a lane-0-only arrival, branch or predicate, makes ptxas
// serialize the wgmma pipeline: C7513).

template <int D, int kRows, int kStages>
struct WsSmem {
  static constexpr uint32_t kQBytes = kRows * D * 2;            // (kRows, D) bf16, sw128
  static constexpr uint32_t kKVBytes = kWgKeysPerTile * D * 2;  // (128, D) bf16, sw128
  static constexpr uint32_t kBarBytes = 1024;                   // mbarriers: q_full, k/v full/empty per stage
  static constexpr uint32_t kKeyPosBytes = 1024;                // (kStages, 128) u32: documents, the keys' positions
  static constexpr size_t kBytes =
      1024 + kBarBytes + kKeyPosBytes + size_t(kQBytes) + 2 * kStages * size_t(kKVBytes);
  static_assert(8 + 32 * kStages <= kBarBytes, "the mbarriers do not fit");
  static_assert(kStages * kWgKeysPerTile * 4 <= kKeyPosBytes, "key positions do not fit");
};

template <int kStages>
struct WsBars {
  uint32_t base;  // 8-byte mbarriers: q_full, k_full[S], v_full[S], k_empty[S], v_empty[S]
  __device__ __forceinline__ uint32_t q_full() const { return base; }
  __device__ __forceinline__ uint32_t k_full(int s) const { return base + 8 + 8 * s; }
  __device__ __forceinline__ uint32_t v_full(int s) const { return base + 8 + 8 * (kStages + s); }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return base + 8 + 8 * (2 * kStages + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return base + 8 + 8 * (3 * kStages + s); }
};

// Loads one (kRows, D) sw128 tile: D/64 boxes of (kRows rows, 64 columns) at element coordinates
// (column, head, row, batch).
template <int D, int kRows = 128>
__device__ __forceinline__ void tma_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar, int head, int row,
                                         int batch) {
#pragma unroll
  for (int c = 0; c < D / 64; ++c) tma_load_4d(dst + uint32_t(c) * (kRows * 128), map, bar, c * 64, head, row, batch);
}

}  // namespace
}  // namespace cuda
}  // namespace rt
