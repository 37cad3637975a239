// FP8 attention backward v4 on Hopper (sm_90a), issue 47: v3's tile (attn_bwd_fp8_sm90.cu has the recipe, the
// operands, the scales and the tile's order; attn_bwd_fp8_sm90_tile.cuh its pieces) in bwd v5's roles, so that the
// consumers no longer issue or wait for their own loads and reduces, and a CTA runs many units. Selected by
// RT_ATTN_FP8_BWD_KERNEL=v4 (launch_attn_bwd_fp8 in attn_bwd_fp8_sm90.cu; v3 is the default until measured).
// The numerics are v3's exactly: the same products in the same order per tile, the same scale groups and per-tile
// dS amax; only which thread issues the loads and the dQ reduces, and the barriers, differ. So dK, dV equal v3's bit
// for bit and dQ to f32 reassociation among CTAs (the reduces' order is free in both).
//
// Structure (384 threads, 1 CTA an SM, persistent):
//   * units: one (128-key tile, K/V head, sample) each, in v3's order (key tile slowest: the causal units longest
//     first); min(units, SMs) CTAs; CTA c runs unit c first, then the next from a global counter
//     (persistent_unit_counter.h, PersistentKernel::bwd_fp8_v4), so units start in list order and a CTA's next unit's
//     loads overlap this unit's epilogue. The producer publishes each unit in a 2-slot ring (mbarriers unit full /
//     empty) that the consumers and the dQ warp read;
//   * warpgroups 0 and 1 (setmaxnreg 240): v3's consumers, 64 keys each, dK / dV in registers over the unit; the two
//     CTA barriers of v3's tile are named barriers over their 256 threads (kV4BarAmax, kV4BarDsDone);
//   * warpgroup 2 (setmaxnreg 24): warp 0 the producer (v4_producer: every TMA load, lane 0), warp 1 the dQ warp
//     (v4_dq_warp: every dQ reduce-add), warps 2-3 leave at once;
//   * loads: Q, dO (bf16) with lse, delta per 64-query half into a 2-stage ring (stage h = half h of the tile; the
//     consumers release a half once its S, dP, probabilities and dS are formed, so the next tile's half 0 loads while
//     this tile's half 1 runs); K, V, K^T per unit after the previous unit's last MMA; Q^T, dO^T (e4m3) per tile after
//     the dQ warp has read the previous tile's part-0 boxes from their regions (shared memory has no room for a second
//     stage of these: v3's map fills 227 KB but for ~1 KB, kept as is);
//   * dQ: each warpgroup stages its two (64 queries x 64 columns) f32 parts where v3 did (part 0 in dO^T / Q^T, part 1
//     in its staging half), fences them to the async proxy and arrives on a named barrier (160 threads) that the dQ
//     warp syncs on; the dQ warp's lane 0 issues the two tensor reduces of the part, waits for their reads and
//     releases the region (mbarriers t_empty to the producer, stage_free[wg] to the warpgroup's next half 0). The
//     consumers never wait for a bulk group.
// Shared memory: v3's map (attn_bwd_fp8_sm90_tile.cuh) plus 15 mbarriers, the amax keys and the unit ring
//   (attn_bwd_fp8_sm90_v4_roles.cuh): 230,576 B (225.2 KB) + 1 KB alignment slack, 848 B under the 227 KB opt-in.
// ptxas (sm_90a, nvcc 13): 168 registers at launch, 240 / 24 after setmaxnreg, 16 barriers, 52 B spill stores, no
//   C7510-C7515. The spill (SASS): 12-16 B of consumer thread constants (key row, lane parts), stored once and
//   reloaded ~4 times a tile outside the MMA chain, and the rest in warpgroup 2's loops at 24 registers (bwd v5's
//   240 / 24 split has ~130 B there). v3 had 255 registers; the 15 the split takes are what the roles cost.
// Not measured yet (bench/NOTES.md has the prediction). Keep C++17. D = 128 and Nq, Nk multiples of 128 only (v3's
// scope: attn_bwd_fp8_cuda_supports).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_bwd_fp8_launch.h"
#include "kernels/cuda/attention/attn_bwd_fp8_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_bwd_fp8_sm90_v4_roles.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_fp8_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/attention/persistent_unit_counter.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/fp8.h"

namespace rt {
namespace cuda {
namespace fp8bwd {
namespace {

// One consumer warpgroup (wg 0 or 1, tid 0..255): per unit, v3's tile on every (query head, query tile) the keys
// meet, then dK, dV added to dk_acc, dv_acc. The waits: half h's Q / dO / lse / delta (kV4BarQFull), the staging
// free again (kV4BarStageFree, before half 0's dS^T is stored), Q^T / dO^T (kV4BarTFull, before dV); the releases:
// half h (kV4BarQEmpty, after its dS), Q^T read by this warp's dK (kV4BarDkRead), K / V / K^T after the unit's last
// MMA (kV4BarKvEmpty). T counts the CTA's tiles over all units: the phase of every per-tile barrier.
__device__ __forceinline__ void v4_consumer(const Params& p, const V4Shared& sh, int pairs, int tid) {
  const uint32_t base = sh.base, bars = sh.bars;
  unsigned char* const gbase = reinterpret_cast<unsigned char*>(sh.red) - kV4Red;  // base as a generic pointer
  uint8_t* const ds_bytes = gbase + kSmDs;
  const float* const lse_s = reinterpret_cast<const float*>(gbase + kSmLse);
  const float* const delta_s = reinterpret_cast<const float*>(gbase + kSmDelta);
  uint32_t* const red = sh.red;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = (tid % 128) / 32, lane = tid % 32;
  const int t = lane % 4;
  // (8, 128 threads) float4 of warpgroup wg: half 0's dS^T of each thread (v3's staging, split per warpgroup).
  float4* const stage = reinterpret_cast<float4*>(gbase + kSmStage) + wg * 8 * 128;
  const uint32_t dq_part0 = base + (wg == 0 ? kSmDot : kSmQt);
  const uint32_t dq_part1 = base + kSmStage + uint32_t(wg) * kDqPartBytes;
  const int krow = wg * 64 + warp * 16 + lane / 4;  // this thread's key rows of the tile: krow, krow + 8
  const uint32_t k_wg = base + kSmK + uint32_t(wg) * 64 * 128, v_wg = base + kSmV + uint32_t(wg) * 64 * 128;
  uint32_t T = 0;    // tiles so far (all units)
  int kv_uses = 0;   // units with work so far
#pragma unroll 1
  for (int f = 0;; ++f) {
    const int u = v4_read_unit(sh, f, lane);
    if (u < 0) break;
    const int n_iter = v4_unit(p, pairs, u).n_iter;
    if (n_iter == 0) continue;  // no visible pair: nothing loaded, nothing written
    float dk[64], dv[64];  // (64 keys, 128) of this warpgroup, f32: x[nt*4 + 2r + e] = (key krow + 8r, nt*8 + 2t + e)
#pragma unroll
    for (int i = 0; i < 64; ++i) dk[i] = dv[i] = 0.f;
    mbar_wait(bars + kV4BarKvFull, uint32_t(kv_uses) & 1u);
    ++kv_uses;

#pragma unroll 1
    for (int it = 0; it < n_iter; ++it, ++T) {
      // The unit decoded again per tile from an opaque u (not hoisted): only u, it, n_iter and T stay live across the
      // tile, not the unit's fields (at 240 registers they spilled).
      const V4Unit w = v4_unit(p, pairs, int(opaque_u32(uint32_t(u))));
      const int b = w.b, k0 = w.k0;
      const int h = w.hk * int(p.group) + it / w.n_qt, tile = w.i_first + it % w.n_qt;
      const int q0 = tile * kQueries;
      const bool masked = tile_masked(p, k0, q0);  // a range or the causal rule cuts the tile
      const uint32_t phase = T & 1u;
      // The tile's Q / dO scale groups: (b H + h) nblk + tile < 2^31 (the launcher checks); their factors are read
      // where they are used, so that no float of them stays live across the tile.
      const int fidx = (b * int(p.H) + h) * p.nblk + tile;
      float lo[32], hi[32];  // the tile's work accumulator (v3's)

      // ---- half 0: S^T -> lo, dP^T -> hi; P^T to E4M3 (pf0); dS^T (f32) staged; half 1's S^T issued early ----
      uint32_t key = 0;
      uint32_t pf0[8], pf1[8];
      mbar_wait(bars + kV4BarQFull, phase);
      wgmma_fence_regs(lo);
      wgmma_fence_regs(hi);
      wgmma_fence();
      issue_bf16_half(lo, k_wg, base + kSmQ);
      wgmma_commit();
      issue_bf16_half(hi, v_wg, base + kSmDo);
      wgmma_commit();
      wgmma_wait<1>();  // S^T ready; dP^T may still run
      wgmma_fence_regs(lo);
      probs_half_block(lo, lse_s, p, masked, q0, k0, krow, 0, t);
      pack_e4m3_half(lo, kPScale, pf0);
      wgmma_wait<0>();
      wgmma_fence_regs(hi);
      dscores_half_block(hi, lo, delta_s, p.scale, key, t);
      mbar_arrive_warp(bars + kV4BarQEmpty);  // half 0's Q, dO, lse, delta are read no more
      mbar_wait(bars + kV4BarQFull + 8, phase);
      wgmma_fence_regs(lo);
      wgmma_fence_regs(hi);
      wgmma_fence();
      issue_bf16_half(lo, k_wg, base + kSmQ + uint32_t(kHalf) * 128);
      wgmma_commit();
      if (T > 0) mbar_wait(bars + kV4BarStageFree + 8 * uint32_t(wg), (T - 1u) & 1u);  // dQ part 1 read
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
      probs_half_block(lo, lse_s + kHalf, p, masked, q0, k0, krow, kHalf, t);
      pack_e4m3_half(lo, kPScale, pf1);
      wgmma_wait<0>();
      wgmma_fence_regs(hi);
      dscores_half_block(hi, lo, delta_s + kHalf, p.scale, key, t);
      mbar_arrive_warp(bars + kV4BarQEmpty + 8);  // half 1's too

      // ---- dV part 0 into lo, under the amax ----
      mbar_wait(bars + kV4BarTFull, phase);  // this tile's Q^T, dO^T landed
      wgmma_fence_regs(lo);
      fence_regs_u32(pf0);
      fence_regs_u32(pf1);
      wgmma_fence();
      issue_rs_half(lo, pf0, pf1, base + kSmDot);
      wgmma_commit();

      // ---- the tile's dS scale (one amax over 128 x 128) ----
      key = warp_max_key(key);
      if (lane == 0) red[tid / 32] = key;
      named_bar_sync(kV4BarAmax, kV4ConsumerThreads);
      uint32_t mk = 0;
#pragma unroll
      for (int wi = 0; wi < kV4ConsumerThreads / 32; ++wi) mk = max(mk, red[wi]);
      const float ds_s = fp8_scale_of(amax_of_key(mk)), ds_f = fp8_factor_of(ds_s);

      const float dvf = p.p_factor * p.do_factor[fidx];
      wgmma_wait<0>();  // dV part 0 done
      wgmma_fence_regs(lo);
      fold_half(dv, lo, 0, dvf);
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
      fold_half(dv, lo, 1, dvf);

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
      named_bar_sync(kV4BarDsDone, kV4ConsumerThreads);  // the dS tile complete; both past dV and the staging reads
      // K's factor: unit u's (K/V head, sample) and key tile, (b Hkv + hk) nblk_k + kt = (u % pairs) nblk_k + u / pairs.
      const int uo = int(opaque_u32(uint32_t(u)));
      const float kq = ds_f * p.q_factor[fidx], qk = ds_f * p.k_factor[(uo % pairs) * p.nblk_k + uo / pairs];
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
      mbar_arrive_warp(bars + kV4BarDkRead);
      wgmma_fence_regs(hi);
      wgmma_fence();
      issue_dq_part(hi, ds_rows, base + kSmKt + 64 * 128);
      wgmma_commit();
      wgmma_wait<1>();  // dQ part 0 done
      wgmma_fence_regs(lo);
      if (wg == 1) mbar_wait(bars + kV4BarDkRead, phase);  // warpgroup 0's dK has read the Q^T tile too
      v4_dq_part_hand(dq_part0, lo, qk, kV4BarDqPart0 + wg, warp, lane);
      wgmma_wait<0>();  // dQ part 1 done
      wgmma_fence_regs(hi);
      v4_dq_part_hand(dq_part1, hi, qk, kV4BarDqPart1 + wg, warp, lane);
    }
    mbar_arrive_warp(bars + kV4BarKvEmpty);  // the unit's last MMA is done: K, V, K^T may take the next unit's
    const V4Unit w = v4_unit(p, pairs, u);
    const int b = w.b, hk = w.hk, k0 = w.k0;

    // dK, dV rows: each belongs to this unit alone (one add per element per launch).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!key_in_range(p, k0 + krow + 8 * r)) continue;  // rows outside the key range untouched
      const int64_t off = ((int64_t(b) * p.Nk + k0 + krow + 8 * r) * p.Hkv + hk) * kD;
#pragma unroll
      for (int nt = 0; nt < kD / 8; ++nt) {
        const int col = nt * 8 + 2 * t;
        atomic_add_f32x2(p.dk + off + col, dk[nt * 4 + 2 * r], dk[nt * 4 + 2 * r + 1]);
        atomic_add_f32x2(p.dv + off + col, dv[nt * 4 + 2 * r], dv[nt * 4 + 2 * r + 1]);
      }
    }
  }
}

__global__ void __launch_bounds__(kV4Threads, 1)
    attn_bwd_fp8_v4_kernel(const __grid_constant__ V4Maps maps, const __grid_constant__ CUtensorMap dq_map,
                           const Params p, int units, int ctas, int pairs, int* next_unit) {
#if RT_WGMMA_AVAILABLE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - raw);  // the same base as a generic pointer
  const V4Shared sh{base, base + kV4Bars, reinterpret_cast<int*>(gbase + kV4Units),
                    reinterpret_cast<uint32_t*>(gbase + kV4Red)};
  const int tid = int(threadIdx.x);
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = (tid % 128) / 32, lane = tid % 32;
  if (tid == 0) {
    const uint32_t bars = sh.bars;
    for (int s = 0; s < 2; ++s) {
      mbar_init(bars + kV4BarUnitFull + 8 * s, 1);
      mbar_init(bars + kV4BarUnitEmpty + 8 * s, kV4ConsumerThreads / 32 + 1);
      mbar_init(bars + kV4BarQFull + 8 * s, 1);
      mbar_init(bars + kV4BarQEmpty + 8 * s, kV4ConsumerThreads / 32);
      mbar_init(bars + kV4BarStageFree + 8 * s, 1);
    }
    mbar_init(bars + kV4BarKvFull, 1);
    mbar_init(bars + kV4BarKvEmpty, kV4ConsumerThreads / 32);
    mbar_init(bars + kV4BarTFull, 1);
    mbar_init(bars + kV4BarTEmpty, 1);
    mbar_init(bars + kV4BarDkRead, kV4ConsumerThreads / 32);
    mbar_init_fence();
  }
  __syncthreads();  // mbarriers initialized (the only CTA-wide barrier)
  if (wg == 2) {
    setmaxnreg_dec<kV4ProducerRegs>();
    if (warp == 0) v4_producer(maps, p, sh, units, ctas, pairs, next_unit, lane);
    else if (warp == 1) v4_dq_warp(&dq_map, p, sh, pairs, lane);
    return;
  }
  setmaxnreg_inc<kV4ConsumerRegs>();
  v4_consumer(p, sh, pairs, tid);
#else
  // Built without an sm_90a image: launch_attn_bwd_fp8 refuses such binaries, so this never runs.
  __trap();
#endif
}

// A tensor map over an e4m3 (.., D, N) tensor (dims innermost first: N, D, heads, B) with (128, 128, 1, 1) boxes.
CUtensorMap v4_e4m3_transposed_map(const void* base, uint64_t N, uint64_t D, uint64_t heads, uint64_t B) {
  const uint64_t dims[4] = {N, D, heads, B};
  const uint64_t strides[3] = {N, N * D, N * D * heads};
  const uint32_t box[4] = {128, 128, 1, 1};
  return make_tma_map_sw128(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, base, 4, dims, strides, box);
}

}  // namespace
}  // namespace fp8bwd

void launch_attn_bwd_fp8_v4(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                            const Tensor& delta, const AttnFp8BwdCodes& codes, const AttnFp8BwdDims& dims,
                            const AttnFp8BwdMask& mask, Tensor dq_acc, Tensor dk_acc, Tensor dv_acc) {
  using namespace fp8bwd;
  const char* op = "attn_bwd_fp8_from_codes (v4)";
  cudaStream_t stream = stream_for(q, op);
  const int device = q.device.index;
  static int supported[kMaxDevices] = {};  // per device: 0 unknown, 1 yes, 2 no
  int& sup = supported[device_slot(device)];
  if (sup == 0) sup = wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_bwd_fp8_v4_kernel)) ? 1 : 2;
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
              << " past the kernel's unit list and TMA range");
  const uint64_t units = uint64_t(dims.Nk / kKeys) * uint64_t(dims.Hkv) * uint64_t(dims.B);  // key tiles x Hkv x B
  RT_CHECK(units <= uint64_t(INT32_MAX / 2),
           op << ": " << units << " units (Nk / 128 x Hkv x B) past the kernel's 32-bit unit counter");
  RT_CHECK(uint64_t(dims.B) * uint64_t(dims.H) * uint64_t(dims.Nq / kQueries) <= uint64_t(INT32_MAX),
           op << ": B x H x Nq / 128 = " << dims.B * dims.H * (dims.Nq / kQueries)
              << " scale groups past the kernel's 32-bit factor index");
  static bool configured[kMaxDevices] = {};
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_fp8_v4_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kV4SmemBytes)));
    configured[device_slot(device)] = true;
  }
  const uint64_t B = uint64_t(dims.B), Nq = uint64_t(dims.Nq), Nk = uint64_t(dims.Nk), H = uint64_t(dims.H),
                 Hkv = uint64_t(dims.Hkv), D = uint64_t(dims.D);
  V4Maps m;
  m.q = make_rows_heads_tma_map(q.data, dims.B, dims.Nq, dims.Nq, dims.H, dims.D, kHalf);  // a half's rows
  m.dout = make_rows_heads_tma_map(dout.data, dims.B, dims.Nq, dims.Nq, dims.H, dims.D, kHalf);
  m.k = make_rows_heads_tma_map(k.data, dims.B, dims.Nk, dims.Nk, dims.Hkv, dims.D, kKeys);
  m.v = make_rows_heads_tma_map(v.data, dims.B, dims.Nk, dims.Nk, dims.Hkv, dims.D, kKeys);
  m.qt = v4_e4m3_transposed_map(codes.qt.data, Nq, D, H, B);
  m.dot = v4_e4m3_transposed_map(codes.dot.data, Nq, D, H, B);
  m.kt = v4_e4m3_transposed_map(codes.kt.data, Nk, D, Hkv, B);
  // dq_acc (B,Nq,H,D) f32, boxes of (32 columns, 1 head, 64 query rows, 1 sample): the dQ parts' TMA reduces.
  const CUtensorMap dq_map = make_rows_heads_tma_map(dq_acc.data, dims.B, dims.Nq, dims.Nq, dims.H, dims.D, 64, 4);
  Params p;  // as v3's launcher fills it (attn_bwd_fp8_sm90.cu)
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
  if (units == 0) return;
  // CTAs: one an SM, at most one a unit. RT_ATTN_FP8_BWD_V4_CTAS=n (n >= 1) caps them for tests, so that small cases
  // run several units a CTA (the unit ring, the phases across units, the counter's reset).
  int n_sm = device_props().multiProcessorCount;  // `device` is current (stream_for)
  if (const char* cap = std::getenv("RT_ATTN_FP8_BWD_V4_CTAS"); cap != nullptr && cap[0] != '\0') {
    const int n = std::atoi(cap);
    RT_CHECK(n >= 1, op << ": RT_ATTN_FP8_BWD_V4_CTAS=" << cap << " is not a CTA count >= 1");
    n_sm = std::min(n_sm, n);
  }
  const int ctas = int(std::min<uint64_t>(units, uint64_t(n_sm)));
  int* next_unit = persistent_unit_counter(PersistentKernel::bwd_fp8_v4, device, stream);
  attn_bwd_fp8_v4_kernel<<<dim3(unsigned(ctas), 1, 1), kV4Threads, kV4SmemBytes, stream>>>(
      m, dq_map, p, int(units), ctas, int(Hkv * B), next_unit);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
