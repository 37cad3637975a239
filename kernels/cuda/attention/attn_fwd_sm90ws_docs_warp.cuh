// fwd v5's docs warp (kernels/cuda/attention/attn_fwd_sm90ws.cu; warp 1 of the producer warpgroup, with documents
// only): the key positions of each key tile in shared memory, for the consumers' element mask. Included by the fwd v5
// files only (attn_fwd_sm90ws.cu and the list mode's attn_fwd_work_list.cu: its names stay in each unit's anonymous
// namespace); keep C++17.
#pragma once
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
// The list mode (attn_fwd_work_list.cu) runs it as is over its unit's tiles: the tile test's key ranges come from the
// list (list_tile_keys), so nothing here waits on more than the positions' loads before the arrival.
template <int kStages>
__device__ __forceinline__ void key_positions_warp(const AttnFwdParams& p, int64_t b, int64_t k_lo,
                                                   const unsigned short* live, int n_tiles,
                                                   const WsBars<kStages>& bars, uint32_t* key_pos, int lane) {
  const int64_t* k_pos = p.docs.k_pos + b * p.docs.k_stride;
#pragma unroll 1
  for (int j = 0; j < n_tiles; ++j) {
    const int s = j % kStages;
    if (j >= kStages) mbar_wait(bars.v_empty(s), uint32_t((j / kStages - 1) & 1));
    const int64_t k0 = k_lo + int64_t(live != nullptr ? live[j] : j) * kWgKeysPerTile;  // the CTA's j-th tile
    uint32_t w[kWgKeysPerTile / 32];
#pragma unroll
    for (int i = 0; i < kWgKeysPerTile / 32; ++i) w[i] = uint32_t(k_pos[min(k0 + lane + 32 * i, p.k_end - 1)]);
#pragma unroll
    for (int i = 0; i < kWgKeysPerTile / 32; ++i) key_pos[s * kWgKeysPerTile + lane + 32 * i] = w[i];
    mbar_arrive(bars.k_full(s));
  }
}

}  // namespace
}  // namespace cuda
}  // namespace rt
