// What the FP8 attention backward kernels (issue 47) share: the launch arguments, the shared-memory map and the
// v2 / v3 kernels' launchers. v1: attn_bwd_fp8_sm90.cu (it also holds launch_attn_bwd_fp8, which checks, builds these
// arguments and picks the kernel: RT_ATTN_FP8_BWD_KERNEL=v1|v2|v3, default v2); v2: attn_bwd_fp8_sm90_v2.cu; v3:
// attn_bwd_fp8_sm90_v3.cu (v2 with dQ through shared memory and TMA reduces). All run
// one CTA of 256 threads (2 warpgroups x 64 keys) per (128-key tile, K/V head, sample) over the same shared memory.
// Keep C++17.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention/attn_bwd_fp8_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"

namespace rt {
namespace cuda {
namespace fp8bwd {

constexpr int kFp8BwdThreads = 256;
// Shared memory, from a 1024-byte aligned base.
constexpr uint32_t kSmK = 0;                                // (128 keys, 128) bf16 sw128
constexpr uint32_t kSmV = kSmK + kBf16TileBytes;            // (128 keys, 128) bf16 sw128
constexpr uint32_t kSmQ = kSmV + kBf16TileBytes;            // (128 queries, 128) bf16 sw128
constexpr uint32_t kSmDo = kSmQ + kBf16TileBytes;           // (128 queries, 128) bf16 sw128
constexpr uint32_t kSmKt = kSmDo + kBf16TileBytes;          // (128 D, 128 keys) e4m3 sw128
constexpr uint32_t kSmQt = kSmKt + kFp8TileBytes;           // (128 D, 128 queries) e4m3 sw128, permuted per 16
constexpr uint32_t kSmDot = kSmQt + kFp8TileBytes;          // (128 D, 128 queries) e4m3 sw128, permuted per 16
constexpr uint32_t kSmDs = kSmDot + kFp8TileBytes;          // (128 queries, 128 keys) e4m3 sw128
constexpr uint32_t kSmStage = kSmDs + kFp8TileBytes;        // (8, 256 threads) float4: half 0's dS^T, per thread
constexpr uint32_t kSmLse = kSmStage + 8 * kFp8BwdThreads * 16;   // (128) f32
constexpr uint32_t kSmDelta = kSmLse + kQueries * 4;        // (128) f32
constexpr uint32_t kSmBars = kSmDelta + kQueries * 4;       // mbarriers: kv, q (bf16 + stats), t (Q^T, dO^T); v2: free
constexpr uint32_t kSmRed = kSmBars + 32;                   // (8 warps) u32 amax keys
constexpr size_t kSmemBytes = size_t(kSmRed) + 32 + 1024;  // + alignment slack
static_assert(kSmemBytes <= 232448, "attn_bwd_fp8: shared memory over the sm_90 opt-in limit (227 KB)");

struct Fp8BwdParams {
  const float* lse;        // (B,H,N)
  const float* delta;      // (B,H,N)
  const float* q_factor;   // (B,H,nblk)
  const float* do_factor;  // (B,H,nblk)
  const float* k_factor;   // (B,Hkv,nblk_k)
  float* dq;               // (B,N,H,D) accumulated
  float* dk;               // (B,Nk,Hkv,D) accumulated
  float* dv;               // (B,Nk,Hkv,D) accumulated
  int64_t N, H, Hkv, group;  // N: query rows (Nq)
  int nblk;                  // query tiles N / 128
  bool causal;
  // The ring's block calls (v2, v3; v1 takes only Nk = N, the full ranges, shift 0): key rows Nk (nblk_k tiles);
  // only query rows [q_begin, q_end) x key rows [k_begin, k_end) take part; causal: key j visible to query i iff
  // j <= i + shift (shift = q_offset - k_offset, clamped to [-2^30, 2^30]: the same pairs for rows below 2^30, and
  // key - shift, query + shift stay in int).
  int64_t Nk;
  int nblk_k;
  int shift, q_begin, q_end, k_begin, k_end;
  float scale;     // 1 / sqrt(D)
  float scale2;    // scale x log2(e)
  float p_factor;  // fp8_factor_from_scale(448): P's factor
};

struct Fp8BwdMaps {
  CUtensorMap q, dout, k, v;  // bf16 (D, heads, N, B), boxes (64 columns, 1, 128 rows, 1)
  CUtensorMap qt, dot, kt;    // e4m3 (N, D, heads, B), boxes (128, 128, 1, 1)
};

// The v2 kernel (attn_bwd_fp8_sm90_v2.cu) over the CTAs of `grid` (key tiles, Hkv, B), launched as one flat grid of
// that many (key tile slowest), kFp8BwdThreads each, kSmemBytes of dynamic shared memory, on `stream`; sets its
// shared-memory attribute on first use per device.
void launch_attn_bwd_fp8_v2_kernel(const Fp8BwdMaps& maps, const Fp8BwdParams& p, dim3 grid, cudaStream_t stream,
                                   int device);
// The v3 kernel (attn_bwd_fp8_sm90_v3.cu): v2's, with dQ added by TMA tensor reduces through dq_map, an f32 map over
// dq_acc (B,N,H,D) with (32 columns, 1 head, 64 rows, 1) sw128 boxes (make_rows_heads_tma_map(..., 64, 4)); p.dq
// unused. Same grid, threads and shared memory as v2.
void launch_attn_bwd_fp8_v3_kernel(const Fp8BwdMaps& maps, const CUtensorMap& dq_map, const Fp8BwdParams& p,
                                   dim3 grid, cudaStream_t stream, int device);

}  // namespace fp8bwd
}  // namespace cuda
}  // namespace rt
