// The FP8 (E4M3) attention backward on Hopper (sm_90a), issue 47: the op's one kernel and its launcher
// launch_attn_bwd_fp8 (kernels/attn_bwd_fp8.h has the contract; the CPU op attn_bwd_block_fp8, kernels/attn_fp8.h, is
// its reference). It was v3 of three (RT_ATTN_FP8_BWD_KERNEL=v1|v2|v3, since removed); v1/v2 before this file held
// only v3, last as of c33daa0: attn_bwd_fp8_sm90.cu held v1 (the serial first tile), attn_bwd_fp8_sm90_v2.cu v2
// (v1's tile reordered, dQ through f32x2 reductions), attn_bwd_fp8_sm90_v3.cu this kernel. bench/NOTES.md has their
// designs and measurements. A v4 (this tile in persistent producer-warp / dQ-warp / consumer roles, ce22f21) gave
// the same bits but ran 10-12% slower on the H200 and was removed (bench/NOTES.md "FP8 attention backward v4").
//
// Operands. FP8 wgmma takes no transpose: both operands must be K-major (contiguous along the contraction).
//   * S^T = K Q^T and dP^T = V dO^T stay bf16 (the recipe): bf16 K, V, Q, dO tiles, K-major as stored (contract
//     over D).
//   * dV = P^T dO (M keys, N = D, K queries): A = P^T from registers (the S^T accumulator, 448 P rounded to E4M3),
//     B = dO^T (D x queries), the quantizer's transposed copy.
//   * dK = dS^T Q: A = dS^T from registers, B = Q^T (D x queries), transposed by the quantizer.
//   * dQ = dS K (M queries, N = D, K keys): A = dS (queries x keys) from shared memory, written by this kernel
//     (byte stores that transpose its register tile), B = K^T (D x keys), transposed by the quantizer.
//   The register A fragments pack the accumulator's values as they lie (queries {2t, 2t+1, 8+2t, 9+2t} read as
//   k = 4t..4t+3): Q^T and dO^T hold their queries in that order within each 16 (the forward's V^T trick), K^T and
//   the dS tile the natural key order. The kernel TMA-loads only K-major (128 x 128-byte) sw128 tiles.
// Scales: every scale group of the recipe is one iteration's tile (Q, dO per 128-row block; K per 128-key block; dS
//   one amax per 128 x 128 tile), so each FP8 product runs in a fresh f32 accumulator over the tile's 128
//   contraction elements and is folded into the f32 dK / dV (registers) or added to dQ (TMA reduces, below) once,
//   scaled by its factor product: the CPU op's "scaled once, added to f32", and a promotion of the FP8 tensor core's
//   ~14-bit sums every 128 elements.
// Structure:
//   * one CTA per (128-key tile, K/V head, sample), 256 threads = 2 warpgroups x 64 keys, 1 CTA an SM, launched as a
//     flat grid with the key tile slowest, so the causal CTAs start longest first across all (sample, K/V head)
//     pairs; dK and dV of the warpgroup's 64 keys x 128 stay in registers (128 a thread) over the loop;
//   * the loop runs over the group's query heads and the 128-query tiles that see the keys (query_tiles_of; a CTA
//     without a visible pair returns before any load); tiles a range or the causal rule cuts (tile_masked) are
//     masked pair by pair;
//   * one work accumulator of 64 registers per tile in two halves, lo and hi (a pair carried across the loop, or a
//     third 64 for dQ beside it, made ptxas serialize the wgmmas: C7511; a wgmma in flight across the loop edge:
//     C7514). The tile is worked in two halves of 64 queries: S_h -> lo, dP_h -> hi (bf16 m64n64k16), P^T_h to
//     E4M3 A fragments (pf0, pf1, kept for the tile), dS^T_h and its amax; half 0's dS^T (f32) waits in the
//     warpgroup's half of the staging area, half 1's in hi; half 1's S is issued as soon as lo is free;
//   * dV sums the tile's 128 queries in one FP8 accumulator (the CPU op's tile sum), two n64 parts of D: part 0 runs
//     under the amax barrier, part 1 under the dS codes and byte stores (store_ds_half_fast);
//   * the tile's dS amax: warp max, shared memory, CTA barrier 1; then dS x s_dS to E4M3: A fragments for dK and
//     bytes into the (128 queries, 128 keys) dS tile; dK parts 0 and 1 both in flight, CTA barrier 2 (the dS tile is
//     complete) under them; dQ (m64n64k32 from shared memory, queries 64 wg .. + 63) in two n64 parts of D, each
//     issued as soon as lo / hi is folded;
//   * dQ leaves the SM through TMA tensor reduces: each warpgroup's (64 queries x 64 columns) f32 part, scaled by
//     f_dS f_K, is stored to shared memory in the 128-byte swizzle of an f32 tensor map over dq_acc (2 boxes of 64
//     rows x 32 columns, 8 KB each; wgbwd::stage_rows_f32_sw128, bwd v5's conflict-free staging), fenced to the
//     async proxy, handed to the warpgroup's issuing thread (tid 0 / 128) by a named barrier (ids 1..4: warps 1-3
//     arrive, warp 0 syncs), which adds it to dq_acc with two cp.reduce.async.bulk.tensor adds (one bulk group per
//     part). Per element one f32 add of the scaled value (the order among CTAs is free). v2's 32 f32x2 reductions
//     a thread a tile throttled the LSU (ncu: lg_throttle 18.6% of the stall samples); this way is 18-21% faster;
//   * loads: thread 0 issues K, V (bf16) and K^T once, and per tile Q, dO (bf16) with lse and delta (1-D bulk
//     copies) on bar_q, the next tile's after barrier 1 (every warpgroup is past its S / dP and lse, delta reads);
//     Q^T and dO^T (bar_t, 2 arrivals): the first tile's from thread 0, later ones from the two issuing threads,
//     each loading the tile its warpgroup's dQ part 0 borrowed (below). All single-buffered.
// Shared memory (the map in attn_bwd_fp8_sm90_tile.cuh): K, V, Q, dO bf16 32 KB each; K^T, Q^T, dO^T, dS e4m3
//   16 KB each; the half-0 dS^T staging 32 KB (16 KB a warpgroup); lse, delta, barriers, amax keys ~1 KB: 225.6 KB
//   + 1 KB alignment slack of the 227 KB opt-in, so the dQ parts have no buffer of their own and reuse regions idle
//   at a tile's end:
//   * part 0 (columns 0..63, issued first): warpgroup 0 into the dO^T tile (read by dV only: free after barrier 2),
//     warpgroup 1 into the Q^T tile (read by both warpgroups' dK: free once bar_free has its 8 warp arrivals);
//   * part 1 (columns 64..127): the warpgroup's half of the staging area (read back before barrier 2, written again
//     only in the next tile's half 0).
// The wait points, each as late as its region's next use allows: in the NEXT tile, under its half-0 S / dP MMAs,
//   the issuing thread waits for part 0's shared-memory reads (the older bulk group: cp.async.bulk.wait_group.read 1)
//   and issues that tile's load of the tile part 0 borrowed (dO^T for warpgroup 0, Q^T for warpgroup 1); after half
//   0's exps and dS it waits for part 1's reads (wait_group.read 0), and the warpgroup's named barrier (ids 5, 6)
//   releases the staging before half 0's dS^T is stored there. Before the CTA ends the issuing threads wait for their
//   reduces' completion (cp.async.bulk.wait_group 0).
// The ring's block calls: dQ rows outside the query range stage exactly 0 (every dS of such a row is 0), so the
//   reduces add +0 to them: values unchanged (a -0 becomes +0); dK / dV rows outside the key range are not written.
// Measured (H200, d128 causal, B 1, H 16; bench/NOTES.md "FP8 attention backward v3"): 449.5 / 463.1 / 505.1 TF/s at
//   4K / 16K / 32K, 0.70-0.86x our bf16 backward (bwd v5); still latency-bound on the tile's serial chain (ncu: 0.51
//   eligible warps per scheduler; the exps and packs leave the tensor pipe idle in both warpgroups at once). Error:
//   vs the CPU op 1.4-3.5e-4, vs fp64 3.65-3.79e-2 on N(0,1) (the CPU op's own).
// ptxas (sm_90a): 255 registers, 0 spill. D = 128 and Nq, Nk multiples of 128 only (no partial tiles). Keep C++17.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_bwd_fp8_launch.h"
#include "kernels/cuda/attention/attn_bwd_fp8_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_fp8_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/fp8.h"

namespace rt {
namespace cuda {
namespace fp8bwd {
namespace {

struct Maps {
  CUtensorMap q, dout, k, v;  // bf16 (D, heads, N, B), boxes (64 columns, 1, 128 rows, 1)
  CUtensorMap qt, dot, kt;    // e4m3 (N, D, heads, B), boxes (128, 128, 1, 1)
};

__global__ void __launch_bounds__(kFp8BwdThreads, 1)
    attn_bwd_fp8_kernel(const __grid_constant__ Maps maps, const __grid_constant__ CUtensorMap dq_map,
                           const Params p) {
#if RT_WGMMA_AVAILABLE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);  // the same base as a generic pointer
  uint8_t* ds_bytes = gbase + kSmDs;
  const float* lse_s = reinterpret_cast<const float*>(gbase + kSmLse);
  const float* delta_s = reinterpret_cast<const float*>(gbase + kSmDelta);
  uint32_t* red = reinterpret_cast<uint32_t*>(gbase + kSmRed);
  const uint32_t bar_kv = base + kSmBars, bar_q = bar_kv + 8;
  const uint32_t bar_t = bar_kv + 16;     // Q^T, dO^T landed: 2 arrivals (one per tile, 16 KB each)
  const uint32_t bar_free = bar_kv + 24;  // every warp is past this tile's reads of Q^T, dO^T (8 warp arrivals)

  const int tid = int(threadIdx.x);
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const bool issuer = (tid % 128) == 0;  // the warpgroup's bulk-reduce thread
  // (8, 128 threads) float4 of warpgroup wg: half 0's dS^T of each thread (the staging area split per warpgroup).
  float4* stage = reinterpret_cast<float4*>(gbase + kSmStage) + wg * 8 * 128;
  // dQ part 0 (columns 0..63, issued first) into the tile this warpgroup reloads (dO^T / Q^T), part 1 into its
  // staging: each (64 queries, 64 columns) f32 as 2 sw128 boxes of (64 rows, 32 columns).
  const uint32_t dq_part0 = base + (wg == 0 ? kSmDot : kSmQt);
  const uint32_t dq_part1 = base + kSmStage + uint32_t(wg) * kDqPartBytes;
  // CTA order (a flat grid): key tile slowest, then K/V head, then sample (causal CTAs longest first).
  const int64_t pairs = int64_t(gridDim.x) / p.nblk_k;  // (sample, K/V head) pairs
  const int kt_idx = int(int64_t(blockIdx.x) / pairs);
  const int64_t pair = int64_t(blockIdx.x) % pairs, hk = pair % p.Hkv, b = pair / p.Hkv;
  const int64_t k0 = int64_t(kt_idx) * kKeys;
  int i_first, i_end;  // the query tiles that see these keys (the whole causal sequence: kt_idx .. nblk - 1)
  query_tiles_of(p, kt_idx, i_first, i_end);
  const int n_qt = i_end - i_first;
  const int n_iter = int(p.group) * n_qt;
  if (n_iter == 0) return;  // no visible pair: nothing loaded, nothing written

  // Iteration it: query head hk * group + it / n_qt, query tile i_first + it % n_qt.
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
  auto issue_t = [&](int it, int which) {  // e4m3 dO^T (which 0) or Q^T (1) of iteration it
    const int h = head_of(it), q0 = tile_of(it) * kQueries, ib = int(b);
    mbar_arrive_expect_tx(bar_t, kFp8TileBytes);
    if (which == 0) tma_load_4d(base + kSmDot, &maps.dot, bar_t, q0, 0, h, ib);
    else tma_load_4d(base + kSmQt, &maps.qt, bar_t, q0, 0, h, ib);
  };

  if (tid == 0) {
    mbar_init(bar_kv, 1);
    mbar_init(bar_q, 1);
    mbar_init(bar_t, 2);
    mbar_init(bar_free, kFp8BwdThreads / 32);
    mbar_init_fence();
  }
  __syncthreads();
  if (tid == 0) {
    const int ihk = int(hk), ib = int(b), ik0 = int(k0);
    tma_prefetch_desc(&dq_map);
    mbar_arrive_expect_tx(bar_kv, 2 * kBf16TileBytes + kFp8TileBytes);
    for (int c = 0; c < 2; ++c) {
      tma_load_4d(base + kSmK + uint32_t(c) * kBf16BlockBytes, &maps.k, bar_kv, 64 * c, ihk, ik0, ib);
      tma_load_4d(base + kSmV + uint32_t(c) * kBf16BlockBytes, &maps.v, bar_kv, 64 * c, ihk, ik0, ib);
    }
    tma_load_4d(base + kSmKt, &maps.kt, bar_kv, ik0, 0, ihk, ib);
    issue_q(0);
    issue_t(0, 0);
    issue_t(0, 1);
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
    // The tile's work accumulator: (64 keys, 64 queries) S^T / dP^T, then (64 keys or queries, 64 columns of D)
    // products.
    float lo[32], hi[32];

    // ---- half 0: S^T -> lo, dP^T -> hi; P^T to E4M3 (pf0); dS^T (f32) staged; half 1's S^T issued early ----
    uint32_t key = 0;         // amax key of this thread's dS^T values
    uint32_t pf0[8], pf1[8];  // 448 P^T as E4M3 A fragments: queries 0..63, 64..127
    wgmma_fence_regs(lo);
    wgmma_fence_regs(hi);
    wgmma_fence();
    issue_bf16_half(lo, k_wg, base + kSmQ);
    wgmma_commit();
    issue_bf16_half(hi, v_wg, base + kSmDo);
    wgmma_commit();
    // The previous tile's dQ part 0 reduces (the older bulk group) have read the dO^T / Q^T tile this warpgroup
    // owns: this tile's load of it may start.
    if (issuer && it > 0) {
      bulk_wait_read<1>();
      issue_t(it, wg);
    }
    wgmma_wait<1>();  // S^T ready; dP^T may still run
    wgmma_fence_regs(lo);
    probs_half_block(lo, lse_s, p, masked, q0, int(k0), krow, 0, t);
    pack_e4m3_half(lo, kPScale, pf0);
    wgmma_wait<0>();
    wgmma_fence_regs(hi);
    dscores_half_block(hi, lo, delta_s, p.scale, key, t);
    wgmma_fence_regs(lo);
    wgmma_fence_regs(hi);
    wgmma_fence();
    issue_bf16_half(lo, k_wg, base + kSmQ + uint32_t(kHalf) * 128);
    wgmma_commit();
    if (issuer) bulk_wait_read<0>();          // the previous tile's part 1 reduces have read the staging
    named_bar_sync(kBarStageFree + wg, 128);  // ... as every thread of the warpgroup now knows
#pragma unroll
    for (int j = 0; j < 8; ++j)
      stage[j * 128 + (tid % 128)] = make_float4(hi[4 * j], hi[4 * j + 1], hi[4 * j + 2], hi[4 * j + 3]);

    // ---- half 1: dP^T -> hi; P^T to E4M3 (pf1); dS^T (f32) stays in hi ----
    wgmma_fence_regs(hi);
    wgmma_fence();
    issue_bf16_half(hi, v_wg, base + kSmDo + uint32_t(kHalf) * 128);
    wgmma_commit();
    wgmma_wait<1>();
    wgmma_fence_regs(lo);
    probs_half_block(lo, lse_s + kHalf, p, masked, q0, int(k0), krow, kHalf, t);
    pack_e4m3_half(lo, kPScale, pf1);
    wgmma_wait<0>();
    wgmma_fence_regs(hi);
    dscores_half_block(hi, lo, delta_s + kHalf, p.scale, key, t);

    // ---- dV part 0 into lo, under the amax ----
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
    // ---- dV part 1 into lo, under the dS codes and byte stores ----
    wgmma_fence_regs(lo);
    fence_regs_u32(pf0);
    fence_regs_u32(pf1);
    wgmma_fence();
    issue_rs_half(lo, pf0, pf1, base + kSmDot + 64 * 128);
    wgmma_commit();

    uint32_t df0[8], df1[8];
    pack_e4m3_half(hi, ds_s, df1);
    store_ds_half_fast(ds_bytes, df1, krow, kHalf, t);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float4 x = stage[j * 128 + (tid % 128)];
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

    // ---- dK (both parts in flight), the dS barrier under them, then dQ in two n64 parts of D ----
    wgmma_fence_regs(lo);
    wgmma_fence_regs(hi);
    fence_regs_u32(df0);
    fence_regs_u32(df1);
    wgmma_fence();
    issue_rs_half(lo, df0, df1, base + kSmQt);
    wgmma_commit();
    issue_rs_half(hi, df0, df1, base + kSmQt + 64 * 128);
    wgmma_commit();
    __syncthreads();  // the dS tile is complete; every warpgroup is past dV (dO^T free) and its staging reads
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
    const int q_wg = q0 + wg * 64;  // the warpgroup's first query row
    wgmma_wait<1>();  // dQ part 0 done
    wgmma_fence_regs(lo);
    if (wg == 1) mbar_wait(bar_free, phase);  // warpgroup 0's dK has read the Q^T tile too
    dq_part_out(&dq_map, dq_part0, lo, qk, kBarDqPart0 + wg, 0, h, q_wg, int(b), warp, lane);
    wgmma_wait<0>();  // dQ part 1 done
    wgmma_fence_regs(hi);
    dq_part_out(&dq_map, dq_part1, hi, qk, kBarDqPart1 + wg, 64, h, q_wg, int(b), warp, lane);
  }
  if (issuer) bulk_wait<0>();  // the reduces performed before the CTA (and its shared memory) ends

  // dK, dV rows: each belongs to this CTA alone (one add per element per launch).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!key_in_range(p, int(k0) + krow + 8 * r)) continue;  // rows outside the key range untouched
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


// A tensor map over an e4m3 (.., D, N) tensor (dims innermost first: N, D, heads, B) with (128, 128, 1, 1) boxes.
CUtensorMap e4m3_transposed_map(const void* base, uint64_t N, uint64_t D, uint64_t heads, uint64_t B) {
  const uint64_t dims[4] = {N, D, heads, B};
  const uint64_t strides[3] = {N, N * D, N * D * heads};
  const uint32_t box[4] = {128, 128, 1, 1};
  return make_tma_map_sw128(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, base, 4, dims, strides, box);
}

}  // namespace
}  // namespace fp8bwd

void launch_attn_bwd_fp8(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                         const Tensor& delta, const AttnFp8BwdCodes& codes, const AttnFp8BwdDims& dims,
                         const AttnFp8BwdMask& mask, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc) {
  using namespace fp8bwd;
  const char* op = "attn_bwd_fp8_from_codes";
  cudaStream_t stream = stream_for(q, op);
  const int device = q.device.index;
  static int supported[kMaxDevices] = {};  // per device: 0 unknown, 1 yes, 2 no
  int& sup = supported[device_slot(device)];
  if (sup == 0) sup = wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_bwd_fp8_kernel)) ? 1 : 2;
  RT_CHECK(sup == 1, op << ": this GPU (" << device_props().name << ", sm_" << device_props().major
                        << device_props().minor
                        << ") cannot run the FP8 attention backward kernel: it needs an H100 / H200 (sm_90) and a "
                           "build with sm_90a SASS (RINGTRAIN_CUDA_ARCHS containing 90a); elsewhere run the bf16 "
                           "backward (attn_bwd_block)");
  RT_CHECK(dims.D == kD && dims.Nq % kQueries == 0 && dims.Nq > 0 && dims.Nk % kKeys == 0 && dims.Nk > 0,
           op << ": D = " << dims.D << ", Nq = " << dims.Nq << ", Nk = " << dims.Nk
              << "; the kernel takes D = 128 and Nq, Nk positive multiples of 128");
  RT_CHECK(dims.Nq <= (int64_t(1) << 30) && dims.Nk <= (int64_t(1) << 30) && dims.Hkv <= 65535 && dims.B <= 65535,
           op << ": Nq = " << dims.Nq << ", Nk = " << dims.Nk << ", Hkv = " << dims.Hkv << ", B = " << dims.B
              << " past the kernel's grid and TMA range");
  const uint64_t ctas = uint64_t(dims.Nk / kKeys) * uint64_t(dims.Hkv) * uint64_t(dims.B);  // key tiles x Hkv x B
  RT_CHECK(ctas <= uint64_t(INT32_MAX),
           op << ": " << ctas << " CTAs (Nk / 128 x Hkv x B) past the kernel's flat grid (2^31 - 1)");
  static bool configured[kMaxDevices] = {};
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    configured[device_slot(device)] = true;
  }
  const uint64_t B = uint64_t(dims.B), Nq = uint64_t(dims.Nq), Nk = uint64_t(dims.Nk), H = uint64_t(dims.H),
                 Hkv = uint64_t(dims.Hkv), D = uint64_t(dims.D);
  Maps m;
  m.q = make_rows_heads_tma_map(q.data, dims.B, dims.Nq, dims.Nq, dims.H, dims.D, kQueries);
  m.dout = make_rows_heads_tma_map(dout.data, dims.B, dims.Nq, dims.Nq, dims.H, dims.D, kQueries);
  m.k = make_rows_heads_tma_map(k.data, dims.B, dims.Nk, dims.Nk, dims.Hkv, dims.D, kKeys);
  m.v = make_rows_heads_tma_map(v.data, dims.B, dims.Nk, dims.Nk, dims.Hkv, dims.D, kKeys);
  m.qt = e4m3_transposed_map(codes.qt.data, Nq, D, H, B);
  m.dot = e4m3_transposed_map(codes.dot.data, Nq, D, H, B);
  m.kt = e4m3_transposed_map(codes.kt.data, Nk, D, Hkv, B);
  // dq_acc (B,Nq,H,D) f32, boxes of (32 columns, 1 head, 64 query rows, 1 sample): the dQ parts' TMA reduces.
  const CUtensorMap dq_map = make_rows_heads_tma_map(dq_acc.data, dims.B, dims.Nq, dims.Nq, dims.H, dims.D, 64, 4);
  Params p;
  p.lse = lse.ptr<const float>();
  p.delta = delta.ptr<const float>();
  p.q_factor = codes.q_factor.ptr<const float>();
  p.do_factor = codes.do_factor.ptr<const float>();
  p.k_factor = codes.k_factor.ptr<const float>();
  p.dk = dk_acc.ptr<float>();
  p.dv = dv_acc.ptr<float>();
  p.N = dims.Nq, p.H = dims.H, p.Hkv = dims.Hkv, p.group = dims.H / dims.Hkv;
  p.nblk = int(dims.Nq / kQueries);
  p.causal = mask.causal;
  p.Nk = dims.Nk;
  p.nblk_k = int(dims.Nk / kKeys);
  const int64_t lim = int64_t(1) << 30;  // rows are below 2^30 (checked above): a clamped shift keeps every pair
  p.shift = int(std::max(-lim, std::min(lim, mask.shift)));
  p.q_begin = int(mask.q_begin), p.q_end = int(mask.q_end), p.k_begin = int(mask.k_begin), p.k_end = int(mask.k_end);
  p.scale = float(1.0 / std::sqrt(double(dims.D)));
  p.scale2 = p.scale * 1.4426950408889634f;
  p.p_factor = fp8_factor_from_scale(kPScale);
  attn_bwd_fp8_kernel<<<dim3(unsigned(ctas), 1, 1), kFp8BwdThreads, kSmemBytes, stream>>>(m, dq_map, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
