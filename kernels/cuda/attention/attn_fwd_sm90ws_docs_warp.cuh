// fwd v5's docs warp (kernels/cuda/attention/attn_fwd_sm90ws.cu; warp 1 of the producer warpgroup, with documents
// only): the key positions of each key tile in shared memory, for the consumers' element mask. Included by the fwd v5
// files only (attn_fwd_sm90ws.cu and the list mode's attn_fwd_work_list.cu: its names stay in each unit's anonymous
// namespace); keep C++17.
#pragma once
#include <climits>
#include <cstdint>

#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgKeysPerTile (128)

// Documents: warp 1 of the producer warpgroup (idle otherwise) writes, per key tile j of the CTA, the low 32 bits of
// its 128 keys' positions into stage j % kStages of key_pos ((kStages, 128) u32 in shared memory; keys past k_end
// repeat the last key, the softmax masks them by index), then each lane arrives on the stage's K-full barrier, so
// a consumer's wait for K_j also covers them. Tile j overwrites tile j - kStages's positions only once that tile's
// V is released (after its P V, so after its softmax read them). The element mask then reads shared memory, not
// 32 dependent global loads per thread on the softmax's critical path (bench/NOTES.md "key positions in shared
// memory").
// kSums (the list mode, attn_fwd_work_list.cu, which has no per-call summaries): lane 0 also writes the tile's least and
// greatest key position (64-bit, over the same 128 keys) into the (kStages, 2) i64 at shared address key_sum (stage s
// at key_sum + 16 s) before its arrival, for the consumers' tile test (list_tile_keys). Within 24 registers: the
// extremes are taken as 32-bit offsets from the tile's first key (exact: a sample's positions lie within 2^31 of each
// other, DESIGN.md "Document masks").
template <int kStages, bool kSums = false>
__device__ __forceinline__ void key_positions_warp(const AttnFwdParams& p, int64_t b, int64_t k_lo,
                                                   const unsigned short* live, int n_tiles,
                                                   const WsBars<kStages>& bars, uint32_t* key_pos, int lane,
                                                   uint32_t key_sum = 0) {
  const int64_t* k_pos = p.docs.k_pos + b * p.docs.k_stride;
#pragma unroll 1
  for (int j = 0; j < n_tiles; ++j) {
    const int s = j % kStages;
    if (j >= kStages) mbar_wait(bars.v_empty(s), uint32_t((j / kStages - 1) & 1));
    const int64_t k0 = k_lo + int64_t(live != nullptr ? live[j] : j) * kWgKeysPerTile;  // the CTA's j-th tile
    uint32_t w[kWgKeysPerTile / 32];
#pragma unroll
    for (int i = 0; i < kWgKeysPerTile / 32; ++i) w[i] = uint32_t(k_pos[min(k0 + lane + 32 * i, p.k_end - 1)]);
    if constexpr (kSums) {
      const int64_t first = k_pos[min(k0, p.k_end - 1)];  // the same address in every lane
      int lo = INT_MAX, hi = INT_MIN;
#pragma unroll
      for (int i = 0; i < kWgKeysPerTile / 32; ++i) {
        const int off = int(w[i] - uint32_t(first));
        lo = min(lo, off);
        hi = max(hi, off);
      }
      warp_min_max(lo, hi);
      if (lane == 0) {
        asm volatile("st.shared.v2.s64 [%0], {%1, %2};\n" ::"r"(key_sum + 16u * uint32_t(s)), "l"(first + lo),
                     "l"(first + hi)
                     : "memory");
      }
    }
#pragma unroll
    for (int i = 0; i < kWgKeysPerTile / 32; ++i) key_pos[s * kWgKeysPerTile + lane + 32 * i] = w[i];
    mbar_arrive(bars.k_full(s));
  }
}

}  // namespace
}  // namespace cuda
}  // namespace rt
