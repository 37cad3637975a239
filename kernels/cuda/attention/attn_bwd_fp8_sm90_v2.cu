// The FP8 (E4M3) attention backward on Hopper, v2 (issue 47; the default of launch_attn_bwd_fp8, v1 under
// RT_ATTN_FP8_BWD_KERNEL=v1). The same operands, recipe, tile pieces (attn_bwd_fp8_sm90_tile.cuh), shared memory and
// CTA shape as v1 (attn_bwd_fp8_sm90.cu has the design of both: one CTA per (128-key tile, K/V head, sample), 2
// warpgroups x 64 keys, dK / dV in registers, 128-query tiles worked in two halves of 64 queries, thread 0 issuing
// single-buffered TMA loads); v2 reorders the tile so the wgmma pipe is drained less often and the FP8 products run
// under the work between them (v1 drained it 11 times a tile, every fold with the tensor cores idle):
//   * one work accumulator of 64 registers per tile in two halves, lo and hi: S_h -> lo and dP_h -> hi in the
//     halves, the (64 keys x 64 columns of D) FP8 products in lo / hi (a pair carried across the loop, or a third
//     64 for dQ beside it, made ptxas serialize the wgmmas: C7511);
//   * the halves form S, dP, P (E4M3 A fragments pf0, pf1 kept for the tile) and dS (half 0 staged in shared memory
//     as v1, half 1 in hi), with no FP8 product between them; half 1's S is issued as soon as lo is free;
//   * dV sums the tile's 128 queries in one FP8 accumulator (the CPU op's tile sum; v1 folded per 64-query half):
//     part 0 (columns 0..63) is issued before the amax barrier and runs under the amax, part 1 after it, under the
//     dS codes and byte stores (two per-thread offsets plus immediates: store_ds_half_fast);
//   * dK parts 0 and 1 both in flight, the dS barrier under them; dQ in two n64 parts of D, each issued as soon as
//     lo / hi is folded, part 0's f32x2 reductions under part 1; the next tile's Q^T / dO^T load waits on an
//     mbarrier of 8 warp arrivals (every warp past dK) instead of a CTA barrier;
//   * a flat grid with the key tile slowest: the causal CTAs start longest first across all (sample, K/V head) pairs
//     (v1: head by head; a list-scheduling model of 4K, B 1, H 16 gives 0.78 of ideal for v1's order, 0.98 for
//     this one; 16K and 32K ~1.0 either way).
// Drains a tile: S/dP 4 (as v1), dV 2 (each behind the amax / the dS codes), then one at the end (dQ part 1).
// ptxas (sm_90a): 253 registers, 0 spill, no C751x (v1: 255, 8 bytes spill); with the block mask 254, 0 spill.
// PREDICTION (H200, d128 causal, B 1, H 16; before any GPU run): 4K ~370-430 (1.3-1.5x v1's 287: the grid order
// ~1.25x, the tile ~1.1-1.2x), 16K ~420-470 (v1 381), 32K ~440-490 (v1 404) TF/s: 0.7-0.8x our bf16 backward, not
// >= 1.0x. Same error as v1 (vs the CPU op ~1e-4..1e-3, vs fp64 3.6-3.8e-2). What stays serial: the exps and packs
// leave the tensor pipe idle in both warpgroups at once (they run in phase between 2 CTA barriers a tile), and the
// next tile's S waits for dQ (a wgmma in flight across the loop edge made ptxas serialize: C7514). The shared memory
// leaves no room for a second Q / dO stage (96 KB a stage), the registers none for a producer warpgroup.
// The ring's block calls (Fp8BwdParams' ranges, offsets, Nq != Nk): a CTA runs the query tiles its key tile meets
// (query_tiles_of; none: it returns before any load and writes nothing), masks P and dS pair by pair in the tiles a
// range or the causal rule cuts (tile_masked; the whole sequence: the diagonal, as before), and skips the dQ / dK /
// dV rows outside the ranges. D = 128 and Nq, Nk multiples of 128 only. Keep C++17.
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention/attn_bwd_fp8_sm90_args.cuh"
#include "kernels/cuda/attention/attn_bwd_fp8_sm90_ops.cuh"
#include "kernels/cuda/attention/attn_bwd_fp8_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace fp8bwd {
namespace {

// f x (a (64 queries x 64 columns) accumulator part) added into columns col0 .. col0 + 63 of 2 rows of a (.., 128)
// f32 tensor with f32x2 reductions: row0 the thread's query row g, row0 + 8 row_stride its row g + 8; row g + 8r
// only when bit r of rows_in is set (the query range).
__device__ __forceinline__ void red_add_part(float* row0, int64_t row_stride, int col0, const float (&x)[32], float f,
                                             int t, int rows_in) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!((rows_in >> r) & 1)) continue;
    float* row = row0 + 8 * r * row_stride + col0;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
      atomic_add_f32x2(row + nt * 8 + 2 * t, x[nt * 4 + 2 * r] * f, x[nt * 4 + 2 * r + 1] * f);
  }
}

__global__ void __launch_bounds__(kFp8BwdThreads, 1) attn_bwd_fp8_v2_kernel(const __grid_constant__ Fp8BwdMaps maps,
                                                                     const Fp8BwdParams p) {
#if RT_WGMMA_AVAILABLE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);  // the same base as a generic pointer
  uint8_t* ds_bytes = gbase + kSmDs;
  float4* stage = reinterpret_cast<float4*>(gbase + kSmStage);
  const float* lse_s = reinterpret_cast<const float*>(gbase + kSmLse);
  const float* delta_s = reinterpret_cast<const float*>(gbase + kSmDelta);
  uint32_t* red = reinterpret_cast<uint32_t*>(gbase + kSmRed);
  const uint32_t bar_kv = base + kSmBars, bar_q = bar_kv + 8, bar_t = bar_kv + 16;
  const uint32_t bar_free = bar_kv + 24;  // every warp is past this tile's reads of Q^T, dO^T (8 warp arrivals)

  const int tid = int(threadIdx.x);
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  // CTA order (a 1-D grid, launch_attn_bwd_fp8_v2_kernel): key tile slowest, then K/V head, then sample, so the
  // causal CTAs start longest first across all (sample, head) pairs (v1's grid ran them head by head: the last
  // head's longest CTAs started last, and most SMs idled behind them).
  const int64_t pairs = int64_t(gridDim.x) / p.nblk_k;  // (sample, K/V head) pairs
  const int kt_idx = int(int64_t(blockIdx.x) / pairs);
  const int64_t pair = int64_t(blockIdx.x) % pairs, hk = pair % p.Hkv, b = pair / p.Hkv;
  const int64_t k0 = int64_t(kt_idx) * kKeys;
  int i_first, i_end;  // the query tiles that see these keys (the whole causal sequence: kt_idx .. nblk - 1)
  query_tiles_of(p, kt_idx, i_first, i_end);
  const int n_qt = i_end - i_first;
  const int n_iter = int(p.group) * n_qt;
  if (n_iter == 0) return;  // no visible pair: nothing loaded, nothing written

  // Iteration it: query head hk * group + it / n_qt, query tile i_first + it % n_qt (as v1).
  auto head_of = [&](int it) { return int(hk * p.group) + it / n_qt; };
  auto tile_of = [&](int it) { return i_first + it % n_qt; };
  auto issue_q = [&](int it) {  // bf16 Q, dO and the lse, delta rows of iteration it
    const int h = head_of(it), q0 = tile_of(it) * kQueries, ib = int(b);
    mbar_arrive_expect_tx(bar_q, 2 * kBf16TileBytes + 2 * kQueries * 4);
    for (int c = 0; c < 2; ++c) {
      tma_load_4d(base + kSmQ + uint32_t(c) * kBf16BlockBytes, &maps.q, bar_q, 64 * c, h, q0, ib);
      tma_load_4d(base + kSmDo + uint32_t(c) * kBf16BlockBytes, &maps.dout, bar_q, 64 * c, h, q0, ib);
    }
    const int64_t row = (b * p.H + h) * p.N + q0;  // (B,H,Nq) offset
    bulk_load_1d(base + kSmLse, p.lse + row, kQueries * 4, bar_q);
    bulk_load_1d(base + kSmDelta, p.delta + row, kQueries * 4, bar_q);
  };
  auto issue_t = [&](int it) {  // e4m3 Q^T, dO^T of iteration it
    const int h = head_of(it), q0 = tile_of(it) * kQueries, ib = int(b);
    mbar_arrive_expect_tx(bar_t, 2 * kFp8TileBytes);
    tma_load_4d(base + kSmQt, &maps.qt, bar_t, q0, 0, h, ib);
    tma_load_4d(base + kSmDot, &maps.dot, bar_t, q0, 0, h, ib);
  };

  if (tid == 0) {
    mbar_init(bar_kv, 1);
    mbar_init(bar_q, 1);
    mbar_init(bar_t, 1);
    mbar_init(bar_free, kFp8BwdThreads / 32);
    mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    const int ihk = int(hk), ib = int(b), ik0 = int(k0);
    mbar_arrive_expect_tx(bar_kv, 2 * kBf16TileBytes + kFp8TileBytes);
    for (int c = 0; c < 2; ++c) {
      tma_load_4d(base + kSmK + uint32_t(c) * kBf16BlockBytes, &maps.k, bar_kv, 64 * c, ihk, ik0, ib);
      tma_load_4d(base + kSmV + uint32_t(c) * kBf16BlockBytes, &maps.v, bar_kv, 64 * c, ihk, ik0, ib);
    }
    tma_load_4d(base + kSmKt, &maps.kt, bar_kv, ik0, 0, ihk, ib);
    issue_q(0);
    issue_t(0);
  }

  const int krow = wg * 64 + warp * 16 + g;  // this thread's key rows of the tile: krow, krow + 8
  const uint32_t k_wg = base + kSmK + uint32_t(wg) * 64 * 128, v_wg = base + kSmV + uint32_t(wg) * 64 * 128;
  const float kf = p.k_factor[(b * p.Hkv + hk) * p.nblk_k + kt_idx];
  float dk[64], dv[64];  // (64 keys, 128) of this warpgroup, f32: x[nt*4 + 2r + e] = (key krow + 8r, nt*8 + 2t + e)
#pragma unroll
  for (int i = 0; i < 64; ++i) dk[i] = dv[i] = 0.f;
  mbar_wait(bar_kv, 0);

#pragma unroll 1
  for (int it = 0; it < n_iter; ++it) {
    const int h = head_of(it), tile = tile_of(it);
    const int q0 = tile * kQueries;
    const bool masked = tile_masked(p, int(k0), q0);  // a range or the causal rule cuts the tile
    const uint32_t phase = uint32_t(it & 1);
    const float qf = p.q_factor[(b * p.H + h) * p.nblk + tile];
    const float dof = p.do_factor[(b * p.H + h) * p.nblk + tile];
    mbar_wait(bar_q, phase);
    // The work accumulator of the tile: (64 keys, 64 queries) S^T / dP^T, (64 keys, 64 columns of D) products. Local
    // to the tile (as v1's s, dp): carried across the loop, ptxas serialized the wgmmas (C7511).
    float lo[32], hi[32];

    // ---- half 0: S^T -> lo, dP^T -> hi; P^T to E4M3 (pf0); dS^T (f32) staged; half 1's S^T issued early ----
    uint32_t key = 0;  // amax key of this thread's dS^T values
    uint32_t pf0[8], pf1[8];  // 448 P^T as E4M3 A fragments: queries 0..63, 64..127
    wgmma_fence_regs(lo);
    wgmma_fence_regs(hi);
    wgmma_fence();
    issue_bf16_half(lo, k_wg, base + kSmQ);
    wgmma_commit();
    issue_bf16_half(hi, v_wg, base + kSmDo);
    wgmma_commit();
    wgmma_wait<1>();  // S^T ready; dP^T may still run
    wgmma_fence_regs(lo);
    probs_half_block(lo, lse_s, p, masked, q0, int(k0), krow, 0, t);
    pack_e4m3_half(lo, kPScale, pf0);
    wgmma_wait<0>();
    wgmma_fence_regs(hi);
    dscores_half_block(hi, lo, delta_s, p.scale, key, t);
    // lo (P^T) is dead: half 1's S^T into it while half 0's dS^T is staged.
    wgmma_fence_regs(lo);
    wgmma_fence_regs(hi);
    wgmma_fence();
    issue_bf16_half(lo, k_wg, base + kSmQ + uint32_t(kHalf) * 128);
    wgmma_commit();
#pragma unroll
    for (int j = 0; j < 8; ++j)
      stage[j * kFp8BwdThreads + tid] = make_float4(hi[4 * j], hi[4 * j + 1], hi[4 * j + 2], hi[4 * j + 3]);

    // ---- half 1: dP^T -> hi; P^T to E4M3 (pf1); dS^T (f32) stays in hi ----
    wgmma_fence_regs(hi);
    wgmma_fence();
    issue_bf16_half(hi, v_wg, base + kSmDo + uint32_t(kHalf) * 128);
    wgmma_commit();
    wgmma_wait<1>();  // S^T ready
    wgmma_fence_regs(lo);
    probs_half_block(lo, lse_s + kHalf, p, masked, q0, int(k0), krow, kHalf, t);
    pack_e4m3_half(lo, kPScale, pf1);
    wgmma_wait<0>();
    wgmma_fence_regs(hi);
    dscores_half_block(hi, lo, delta_s + kHalf, p.scale, key, t);

    // ---- dV part 0 (columns 0..63 of D, all 128 queries) into lo, under the amax ----
    mbar_wait(bar_t, phase);  // this tile's Q^T, dO^T landed
    wgmma_fence_regs(lo);
    fence_regs_u32(pf0);
    fence_regs_u32(pf1);
    wgmma_fence();
    issue_rs_half(lo, pf0, pf1, base + kSmDot);
    wgmma_commit();

    // ---- the tile's dS scale (one amax over 128 x 128) ----
    key = warp_max_key(key);
    if (lane == 0) red[tid / 32] = key;
    __syncthreads();  // every warpgroup is past its S^T / dP^T and its reads of lse, delta
    if (tid == 0 && it + 1 < n_iter) issue_q(it + 1);
    uint32_t mk = 0;
#pragma unroll
    for (int w = 0; w < kFp8BwdThreads / 32; ++w) mk = max(mk, red[w]);
    const float ds_s = fp8_scale_of(amax_of_key(mk)), ds_f = fp8_factor_of(ds_s);

    wgmma_wait<0>();  // dV part 0 done
    wgmma_fence_regs(lo);
    fold_half(dv, lo, 0, p.p_factor * dof);
    // ---- dV part 1 (columns 64..127) into lo, under the dS codes and byte stores ----
    wgmma_fence_regs(lo);
    fence_regs_u32(pf0);
    fence_regs_u32(pf1);
    wgmma_fence();
    issue_rs_half(lo, pf0, pf1, base + kSmDot + 64 * 128);
    wgmma_commit();

    uint32_t df0[8], df1[8];  // dS' = e4m3(dS^T s_dS) as E4M3 A fragments: queries 0..63, 64..127
    pack_e4m3_half(hi, ds_s, df1);
    store_ds_half_fast(ds_bytes, df1, krow, kHalf, t);
    // Half 0's dS^T back from the staging area (into hi, free now).
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float4 x = stage[j * kFp8BwdThreads + tid];
      hi[4 * j] = x.x, hi[4 * j + 1] = x.y, hi[4 * j + 2] = x.z, hi[4 * j + 3] = x.w;
    }
    pack_e4m3_half(hi, ds_s, df0);
    store_ds_half_fast(ds_bytes, df0, krow, 0, t);
    fence_proxy_async_smem();  // the dS bytes, for the dQ wgmma after the dS barrier

    wgmma_wait<0>();  // dV part 1 done: pf0, pf1 are free
    wgmma_fence_regs(lo);
    fence_regs_u32(pf0);
    fence_regs_u32(pf1);
    fold_half(dv, lo, 1, p.p_factor * dof);

    // ---- dK += (f_dS x f_Q) dS'^T Q' (both parts in flight), the dS barrier under them, then dQ += (f_dS x f_K)
    //      dS' K' for queries 64 wg .. + 63 in two n64 parts of D, each issued as soon as lo / hi is folded, each
    //      part's f32x2 reductions under the next MMA ----
    wgmma_fence_regs(lo);
    wgmma_fence_regs(hi);
    fence_regs_u32(df0);
    fence_regs_u32(df1);
    wgmma_fence();
    issue_rs_half(lo, df0, df1, base + kSmQt);
    wgmma_commit();
    issue_rs_half(hi, df0, df1, base + kSmQt + 64 * 128);
    wgmma_commit();
    __syncthreads();  // the dS tile is complete (every thread's bytes stored and fenced)
    const float kq = ds_f * qf, qk = ds_f * kf;
    const uint32_t ds_rows = base + kSmDs + uint32_t(wg) * 64 * 128;
    wgmma_wait<1>();  // dK part 0 done
    wgmma_fence_regs(lo);
    fold_half(dk, lo, 0, kq);
    wgmma_fence_regs(lo);
    wgmma_fence();
    issue_dq_part(lo, ds_rows, base + kSmKt);
    wgmma_commit();
    wgmma_wait<1>();  // dK part 1 done: this warp reads Q^T, dO^T no more
    wgmma_fence_regs(hi);
    fence_regs_u32(df0);
    fence_regs_u32(df1);
    fold_half(dk, hi, 1, kq);
    mbar_arrive_warp(bar_free);
    wgmma_fence_regs(hi);
    wgmma_fence();
    issue_dq_part(hi, ds_rows, base + kSmKt + 64 * 128);
    wgmma_commit();
    const int query = q0 + wg * 64 + warp * 16 + g;
    float* const dq_row = p.dq + ((b * p.N + query) * p.H + h) * kD;  // (D) of query row g; row g + 8: 8 H D further
    const int rows_in = masked ? int(query_in_range(p, query)) | (int(query_in_range(p, query + 8)) << 1) : 3;
    wgmma_wait<1>();  // dQ part 0 done
    wgmma_fence_regs(lo);
    red_add_part(dq_row, p.H * kD, 0, lo, qk, t, rows_in);
    if (tid == 0 && it + 1 < n_iter) {  // the next tile's Q^T, dO^T once every warp is past this tile's dK
      mbar_wait(bar_free, phase);
      issue_t(it + 1);
    }
    wgmma_wait<0>();  // dQ part 1 done
    wgmma_fence_regs(hi);
    red_add_part(dq_row, p.H * kD, 64, hi, qk, t, rows_in);
  }

  // dK, dV rows: each belongs to this CTA alone (one add per element per launch); rows outside the key range untouched.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!key_in_range(p, int(k0) + krow + 8 * r)) continue;
    const int64_t off = ((b * p.Nk + k0 + krow + 8 * r) * p.Hkv + hk) * kD;
#pragma unroll
    for (int nt = 0; nt < kD / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      atomic_add_f32x2(p.dk + off + col, dk[nt * 4 + 2 * r], dk[nt * 4 + 2 * r + 1]);
      atomic_add_f32x2(p.dv + off + col, dv[nt * 4 + 2 * r], dv[nt * 4 + 2 * r + 1]);
    }
  }
#else
  // Built without an sm_90a image: launch_attn_bwd_fp8 refuses such binaries, so this never runs.
  __trap();
#endif
}

}  // namespace

void launch_attn_bwd_fp8_v2_kernel(const Fp8BwdMaps& maps, const Fp8BwdParams& p, dim3 grid, cudaStream_t stream,
                                   int device) {
  static bool configured[kMaxDevices] = {};
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(
        cudaFuncSetAttribute(attn_bwd_fp8_v2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    configured[device_slot(device)] = true;
  }
  const uint64_t ctas = uint64_t(grid.x) * grid.y * grid.z;  // (key tiles x K/V heads x samples), decoded by the kernel
  RT_CHECK(ctas <= uint64_t(INT32_MAX), "attn_bwd_fp8_from_codes: " << ctas << " CTAs (Nk / 128 x Hkv x B) past the "
                                                                           "v2 kernel's flat grid (2^31 - 1)");
  const dim3 flat(static_cast<unsigned>(ctas), 1, 1);
  attn_bwd_fp8_v2_kernel<<<flat, kFp8BwdThreads, kSmemBytes, stream>>>(maps, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace fp8bwd
}  // namespace cuda
}  // namespace rt
