// The FP8 (E4M3) attention backward on Hopper, v3 (issue 47; RT_ATTN_FP8_BWD_KERNEL=v3, the default stays v2 until
// measured). v2's tile (attn_bwd_fp8_sm90_v2.cu: the same operands, order of MMAs, folds, factors and f32 sums; dK
// and dV come out bit for bit as v2's) with one change, in how the tile's dQ leaves the SM:
//   v2: each thread adds its 64 dQ values (2 query rows x 32 columns per n64 part) with 32 red.global.add.v2.f32,
//       16 under dQ part 1's MMA and 16 after it: 8 K f32x2 reductions a CTA a tile through the LSU (ncu: lg_throttle
//       18.6% of the stall samples, the largest reason).
//   v3: each warpgroup's (64 queries x 64 columns) f32 part, scaled by the same factor product (f_dS f_K), is stored
//       to shared memory in the 128-byte swizzle of an f32 tensor map over dq_acc (2 boxes of 64 rows x 32 columns,
//       8 KB each; wgbwd::stage_rows_f32_sw128, bwd v5's conflict-free staging), fenced to the async proxy
//       (fence.proxy.async.shared::cta), and added to dq_acc by the warpgroup's first thread with two TMA tensor
//       reduces (cp.reduce.async.bulk.tensor.4d ... add, one bulk group per part). Per element the same single f32
//       add of the same scaled value as v2's reduction (the order among CTAs is free in both).
// Shared memory (the SMEM budget): none added. v2's map (attn_bwd_fp8_sm90_args.cuh) is K, V, Q, dO bf16 32 KB each,
// K^T, Q^T, dO^T, dS e4m3 16 KB each, the half-0 dS^T staging 32 KB, lse / delta / barriers / amax keys ~1 KB:
// 225.6 KB + 1 KB alignment slack of the 227 KB opt-in; no room for a 64 KB dQ buffer, let alone two. The dQ parts
// reuse regions that are idle at the end of a tile:
//   * part 0 (columns 0..63, issued first): warpgroup 0 into the dO^T tile (16 KB, read by dV only: free after the
//     dS barrier), warpgroup 1 into the Q^T tile (read by both warpgroups' dK: free once bar_free has its 8 warp
//     arrivals);
//   * part 1 (columns 64..127) of warpgroup wg: its half of the staging area (16 KB at kSmStage + 16 KB wg; v3
//     splits the staging per warpgroup: entry j of thread i of wg at float4 index wg * 1024 + j * 128 + i). The
//     staging is read back before the dS barrier and written again only in the next tile's half 0.
// The waits, each as late as its region's next use allows: in the NEXT tile, under its half-0 S / dP MMAs, the
// warpgroup's issuing thread (tid 0 / tid 128) waits for part 0's shared-memory reads (the older bulk group:
// cp.async.bulk.wait_group.read 1) and issues that tile's load of the tile it owns (dO^T for warpgroup 0, Q^T for
// warpgroup 1: bar_t takes 2 arrivals; v2 issued both at the end of the previous tile, here they start ~1/4 tile
// later and still have half 1's S / dP before dV part 0 needs them); after half 0's exps and dS it waits for part
// 1's reads (wait_group.read 0), and the warpgroup's named barrier (ids 5, 6) releases the staging before half 0's
// dS^T is stored there. The per-part hand-off to the issuing thread is a named barrier per warpgroup and part
// (ids 1..4: warps 1-3 arrive, warp 0 syncs, so only the issuing warp waits). Before the CTA ends the issuing
// threads wait for their reduces' completion (cp.async.bulk.wait_group 0).
// PREDICTION (H200, d128 causal, B 1, H 16; before any GPU run; v2 measured 369.9 / 391.6 / 418.9 TF/s at
// 4K / 16K / 32K): 4K ~390-420, 16K ~420-460, 32K ~440-490 TF/s (+5-15%): the 32 reductions a thread a tile become
// 32 8-byte shared stores (2 wavefronts each) and 2 bulk ops, the LSU queue no longer throttles the dQ epilogue or
// the next tile's lse / delta reads; what stays is v2's serial tile (exps and packs with the tensor pipe idle, the
// S / dP drains, 2 CTA barriers) and 1 named barrier more a warpgroup. Not the 1.3x goal (~0.7-0.8x bf16 v5).
// The ring's block calls as v2 (query_tiles_of, tile_masked; a CTA without a visible pair returns before any load;
// dK / dV rows outside the key range untouched). dQ rows outside the query range: their staged values are exactly 0
// (every dS of such a row is 0), so the reduces add +0 to them: values unchanged (a -0 becomes +0).
// D = 128 and Nq, Nk multiples of 128 only. Keep C++17.
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention/attn_bwd_fp8_sm90_args.cuh"
#include "kernels/cuda/attention/attn_bwd_fp8_sm90_ops.cuh"
#include "kernels/cuda/attention/attn_bwd_fp8_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace fp8bwd {
namespace {

constexpr uint32_t kDqPartBytes = 64 * 64 * 4;  // (64 queries, 64 columns) f32 of a warpgroup: 2 boxes of 8 KB
static_assert(kDqPartBytes * 2 == 8 * kFp8BwdThreads * 16, "v3: the staging area holds both warpgroups' part 1");
static_assert(kDqPartBytes == kFp8TileBytes, "v3: a Q^T / dO^T tile holds one warpgroup's part 0");
static_assert(kSmStage % 1024 == 0 && kSmQt % 1024 == 0 && kSmDot % 1024 == 0, "v3: sw128 boxes need 1 KB alignment");

// Named barriers (id 0 is __syncthreads): per warpgroup wg, part 0 handed to the issuing thread (1 + wg), part 1
// (3 + wg), the staging free again in the next tile (5 + wg). Distinct ids: warps that only arrive cannot run into
// the next use of the same barrier.
constexpr int kBarDqPart0 = 1, kBarDqPart1 = 3, kBarStageFree = 5;

// The warpgroup's n64 dQ part x (64 queries x 64 columns, accumulator layout) times f into the 2 sw128 boxes at
// `boxes`, then handed to the issuing thread (warp 0's lane 0), which adds them into dq_acc at (column col0, head h,
// query q0, sample b) as one bulk group. Warps 1-3 arrive and go on; warp 0 waits for them.
__device__ __forceinline__ void dq_part_out(const CUtensorMap* dq_map, uint32_t boxes, const float (&x)[32], float f,
                                            int bar_id, int col0, int h, int q0, int b, int warp, int lane) {
  wgbwd::stage_rows_f32_sw128<8>(boxes, x, f, warp, lane / 4, lane % 4);
  fence_proxy_async();  // this thread's stores, before the async proxy reads them
  if (warp != 0) {
    named_bar_arrive(bar_id, 128);
    return;
  }
  named_bar_sync(bar_id, 128);
  if (lane == 0) {
    tma_reduce_add_4d(dq_map, boxes, col0, h, q0, b);
    tma_reduce_add_4d(dq_map, boxes + kDqPartBytes / 2, col0 + 32, h, q0, b);
    bulk_commit();
  }
  __syncwarp();
}

__global__ void __launch_bounds__(kFp8BwdThreads, 1)
    attn_bwd_fp8_v3_kernel(const __grid_constant__ Fp8BwdMaps maps, const __grid_constant__ CUtensorMap dq_map,
                           const Fp8BwdParams p) {
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
  // CTA order as v2: key tile slowest, then K/V head, then sample (causal CTAs longest first).
  const int64_t pairs = int64_t(gridDim.x) / p.nblk_k;  // (sample, K/V head) pairs
  const int kt_idx = int(int64_t(blockIdx.x) / pairs);
  const int64_t pair = int64_t(blockIdx.x) % pairs, hk = pair % p.Hkv, b = pair / p.Hkv;
  const int64_t k0 = int64_t(kt_idx) * kKeys;
  int i_first, i_end;  // the query tiles that see these keys (the whole causal sequence: kt_idx .. nblk - 1)
  query_tiles_of(p, kt_idx, i_first, i_end);
  const int n_qt = i_end - i_first;
  const int n_iter = int(p.group) * n_qt;
  if (n_iter == 0) return;  // no visible pair: nothing loaded, nothing written

  // Iteration it: query head hk * group + it / n_qt, query tile i_first + it % n_qt (as v1, v2).
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
    float lo[32], hi[32];  // the tile's work accumulator (as v2)

    // ---- half 0: S^T -> lo, dP^T -> hi; P^T to E4M3 (pf0); dS^T (f32) staged; half 1's S^T issued early ----
    uint32_t key = 0;
    uint32_t pf0[8], pf1[8];
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

    // ---- dK (both parts in flight), the dS barrier under them, then dQ in two n64 parts of D (as v2) ----
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

}  // namespace

void launch_attn_bwd_fp8_v3_kernel(const Fp8BwdMaps& maps, const CUtensorMap& dq_map, const Fp8BwdParams& p,
                                   dim3 grid, cudaStream_t stream, int device) {
  static bool configured[kMaxDevices] = {};
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(
        cudaFuncSetAttribute(attn_bwd_fp8_v3_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    configured[device_slot(device)] = true;
  }
  const uint64_t ctas = uint64_t(grid.x) * grid.y * grid.z;  // (key tiles x K/V heads x samples), decoded by the kernel
  RT_CHECK(ctas <= uint64_t(INT32_MAX), "attn_bwd_fp8_from_codes: " << ctas << " CTAs (Nk / 128 x Hkv x B) past the "
                                                                           "v3 kernel's flat grid (2^31 - 1)");
  const dim3 flat(static_cast<unsigned>(ctas), 1, 1);
  attn_bwd_fp8_v3_kernel<<<flat, kFp8BwdThreads, kSmemBytes, stream>>>(maps, dq_map, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace fp8bwd
}  // namespace cuda
}  // namespace rt
