// Device pieces the FP8 attention backward v2 and v3 kernels share (attn_bwd_fp8_sm90_v2.cu, attn_bwd_fp8_sm90_v3.cu;
// the rest of their tile is in attn_bwd_fp8_sm90_tile.cuh): the dQ product from the shared-memory dS tile in n64
// parts of D, the dS byte stores with two addresses a thread, and the block mask of the ring's calls (which query
// tiles a key tile meets, which tiles are masked pair by pair, P and dS under that mask). Same layouts as
// attn_bwd_fp8_sm90_tile.cuh.
// Keep C++17; sm_90a only (callers guard with RT_WGMMA_AVAILABLE).
#pragma once
#include <cstdint>

#include "kernels/cuda/attention/attn_bwd_fp8_sm90_args.cuh"
#include "kernels/cuda/attention/attn_bwd_fp8_sm90_tile.cuh"

namespace rt {
namespace cuda {
namespace fp8bwd {

// d (64 x 64 f32 per warpgroup) = A B^T: A (64 x 32) and B^T's rows (64 x 32) e4m3 in shared memory, K-major.
__device__ __forceinline__ void wgmma_m64n64k32_ss_e4m3(float (&d)[32], uint64_t a_desc, uint64_t b_desc,
                                                        int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      RT_WGMMA_D32_REGS
      "}, %32, %33, p, 1, 1;\n}\n"
      : RT_WGMMA_D32_OUT(d)
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// x (64 queries x 64 columns of D per warpgroup) = dS K over the tile's 128 keys (4 k32 steps): ds_rows the
// warpgroup's first row of the (128 queries, 128 keys) dS tile, kt_rows the first of 64 D rows of the (128 D, 128
// keys) K^T tile, both sw128 e4m3. issue_dq's product, one half of D.
__device__ __forceinline__ void issue_dq_part(float (&x)[32], uint32_t ds_rows, uint32_t kt_rows) {
  const uint64_t a0 = sw128_desc(opaque_u32(ds_rows), 16, 1024), b0 = sw128_desc(opaque_u32(kt_rows), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kKeys / 32; ++kk)
    wgmma_m64n64k32_ss_e4m3(x, a0 + uint64_t((kk * 32) >> 4), b0 + uint64_t((kk * 32) >> 4), kk > 0 ? 1 : 0);
}

// store_ds_half's stores (the dS codes of a half into the (128 queries, 128 keys) sw128 e4m3 dS tile at the same
// bytes) with the addresses reduced to two per thread: the thread's keys krow, krow + 8 share one 16-key chunk
// (krow >> 4), and its queries q_half + 8 nt + 2t + e have q & 7 = 2t + e, so the swizzled chunk depends on e only
// and every byte is one of two per-thread offsets plus a constant (an immediate of the store).
__device__ __forceinline__ void store_ds_half_fast(uint8_t* ds_tile, const uint32_t (&f)[8], int krow, int q_half,
                                                   int t) {
  const int chunk = (krow >> 4) & 7, key_lo = krow & 15;  // krow & 15 < 8: key krow + 8 is in the same chunk
  uint8_t* const row_e[2] = {
      ds_tile + (2 * t) * 128 + (((chunk ^ (2 * t)) & 7) << 4) + key_lo,
      ds_tile + (2 * t + 1) * 128 + (((chunk ^ (2 * t + 1)) & 7) << 4) + key_lo,
  };
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t word = f[4 * (nt / 4) + 2 * ((nt % 4) / 2) + r];
        const int byte = (nt % 2) * 2 + e;
        row_e[e][(q_half + nt * 8) * 128 + 8 * r] = uint8_t(word >> (8 * byte));
      }
}


// ---- the block mask (Fp8BwdParams: ranges [q_begin, q_end) x [k_begin, k_end), causal j <= i + shift; all rows
//      below 2^30, so the int arithmetic below does not overflow) ----

// The query tiles [first, end) that key tile kt meets: from the tile of the first query in range that sees the first
// key in range, to the last tile of the query range. Every tile in it has a visible pair (a later tile's last query
// is later still); none (first == end) when the key tile is outside [k_begin, k_end) or no pair is visible. The whole
// sequence: causal [kt, nblk), full [0, nblk).
__device__ __forceinline__ void query_tiles_of(const Fp8BwdParams& p, int kt, int& first, int& end) {
  const int k0 = kt * kKeys;
  const int k_lo = max(k0, p.k_begin), k_hi = min(k0 + kKeys, p.k_end);
  const int q_lo = p.causal ? max(p.q_begin, k_lo - p.shift) : p.q_begin;  // the first query that sees key k_lo
  if (k_lo >= k_hi || q_lo >= p.q_end) {
    first = end = 0;
    return;
  }
  first = q_lo / kQueries;
  end = (p.q_end + kQueries - 1) / kQueries;
}

// Whether the (queries q0 .. q0 + 127, keys k0 .. k0 + 127) tile needs the pair-by-pair mask: a range cuts it, or it
// is causal and some key is later than some query (the whole sequence: the diagonal tile only).
__device__ __forceinline__ bool tile_masked(const Fp8BwdParams& p, int k0, int q0) {
  return q0 < p.q_begin || q0 + kQueries > p.q_end || k0 < p.k_begin || k0 + kKeys > p.k_end ||
         (p.causal && k0 + kKeys - 1 > q0 + p.shift);
}

// probs_half under the block mask: P^T = exp2(S^T scale2 - lse log2 e) in place of s for keys k0 + krow + 8r and
// queries q0 + q_half + nt*8 + 2t + e; in a masked tile (tile_masked) a pair outside the ranges or the causal rule
// gets P = 0 (the CPU op's masked pairs). Unmasked tiles run probs_half's arithmetic alone.
__device__ __forceinline__ void probs_half_block(float (&s)[32], const float* lse_h, const Fp8BwdParams& p,
                                                 bool masked, int q0, int k0, int krow, int q_half, int t) {
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse_h + nt * 8 + 2 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = i & 1, r = i >> 1;
      const float lse = e ? l2.y : l2.x;
      const float lse2 = lse == -INFINITY ? INFINITY : lse * kLog2e;  // no visible key: P = 0
      float pv = fast_exp2(fmaf(s[nt * 4 + i], p.scale2, -lse2));
      if (masked) {  // in the tile's coordinates (query q0 + ql, key k0 + kl): fewer registers live (v3: no spill)
        const int ql = q_half + nt * 8 + 2 * t + e, kl = krow + 8 * r;
        const bool visible = ql >= p.q_begin - q0 && ql < p.q_end - q0 && kl >= p.k_begin - k0 &&
                             kl < p.k_end - k0 && (!p.causal || kl <= ql + (q0 + p.shift - k0));
        if (!visible) pv = 0.f;
      }
      s[nt * 4 + i] = pv;
    }
  }
}

// dscores_half with dS = 0 wherever P = 0: a masked pair (probs_half_block) gets dS = 0 whatever dP and delta hold
// (rows and keys outside the ranges may hold anything, NaN included; the CPU op writes 0 there), so a masked tile's
// amax is the CPU op's over its clipped tile. Applied in every tile (a select per element; keyed on `masked` it cost
// v3 16 bytes more of spill): a visible pair whose P underflowed to 0 gets 0 as well, where the CPU op has 0 x
// (dP - delta), the same value unless dP or delta is not finite.
__device__ __forceinline__ void dscores_half_block(float (&dp)[32], const float (&s)[32], const float* delta_h,
                                                   float scale, uint32_t& key, int t) {
#pragma unroll
  for (int nt = 0; nt < kHalf / 8; ++nt) {
    const float2 dl = *reinterpret_cast<const float2*>(delta_h + nt * 8 + 2 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float v = s[nt * 4 + i] * (dp[nt * 4 + i] - ((i & 1) ? dl.y : dl.x)) * scale;
      if (s[nt * 4 + i] == 0.f) v = 0.f;
      dp[nt * 4 + i] = v;
      key = max(key, amax_key(v));
    }
  }
}

// Whether the dK / dV row `key` (of the CTA's key tile) and the dQ row `query` take part (the ranges).
__device__ __forceinline__ bool key_in_range(const Fp8BwdParams& p, int key) {
  return key >= p.k_begin && key < p.k_end;
}
__device__ __forceinline__ bool query_in_range(const Fp8BwdParams& p, int query) {
  return query >= p.q_begin && query < p.q_end;
}

}  // namespace fp8bwd
}  // namespace cuda
}  // namespace rt
