// fwd v5's grid (kernels/cuda/attention/attn_fwd_sm90ws.cu): the CTAs before the query tiles that own the rows outside
// [q_begin, q_end) in the fresh and finalized forms, and what a CTA writes to rows that no key of the call reaches
// (no_key_rows; also a query tile that sees no key). Included by the fwd v5 files only (attn_fwd_sm90ws.cu and the
// list mode's attn_fwd_work_list.cu: its names stay in each unit's anonymous namespace); keep C++17.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgRowsPerCta (128)

// The query tiles of the rows outside [q_begin, q_end): ceil(q_begin / 128) tiles before the range, then those
// after it up to Nq.
__host__ __device__ inline int outside_tiles(const AttnFwdParams& p) {
  return int((p.q_begin + kWgRowsPerCta - 1) / kWgRowsPerCta +
             (p.Nq - p.q_end + kWgRowsPerCta - 1) / kWgRowsPerCta);
}
__device__ __forceinline__ void outside_tile_rows(const AttnFwdParams& p, int f, int64_t& r0, int64_t& r1) {
  const int before = int((p.q_begin + kWgRowsPerCta - 1) / kWgRowsPerCta);
  if (f < before) {
    r0 = int64_t(f) * kWgRowsPerCta;
    r1 = min(r0 + kWgRowsPerCta, p.q_begin);
  } else {
    r0 = p.q_end + int64_t(f - before) * kWgRowsPerCta;
    r1 = min(r0 + kWgRowsPerCta, p.Nq);
  }
}

// Rows [r0, r1) of head h, batch b that no key of this call reaches, as the call's form leaves them:
//   plain block (state in, state out): untouched;
//   fresh, state out (attn_fwd_block_first): the reset state, acc = 0, m = -inf, l = 0;
//   fresh, finalized (attn_fwd_whole): O = 0, lse = -inf;
//   state in, finalized (attn_fwd_block_last): O and lse from the state, as attn_fwd_finalize computes them
//   (O * (1 / l), 0 where l == 0; lse = (m + log2 l) ln 2, -inf where l == 0).
// All threads of the CTA take part, 4 columns per thread and item; the reads of kBatch items are issued before
// any of their writes (one memory round trip per batch, not per item).
template <int D>
__device__ void no_key_rows(const AttnFwdParams& p, int64_t b, int64_t h, int64_t r0, int64_t r1) {
  if (!p.fresh && p.out == nullptr) return;
  constexpr int kVecs = D / 4;                   // float4 per row
  constexpr int kBatch = 8;
  const int64_t bh_row0 = (b * p.H + h) * p.Nq;  // (B,H,Nq) index of row 0 of this head
  const int n = int(r1 - r0) * kVecs, stride = int(blockDim.x);
  for (int i0 = int(threadIdx.x); i0 < n; i0 += kBatch * stride) {
    if (p.out == nullptr) {  // fresh state
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * stride;
        if (i >= n) break;
        const int64_t row = bh_row0 + r0 + i / kVecs;
        const int c = (i % kVecs) * 4;
        *reinterpret_cast<float4*>(p.acc + row * D + c) = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c == 0) {
          p.m[row] = -INFINITY;
          p.l[row] = 0.f;
        }
      }
      continue;
    }
    float4 a[kBatch];
    float lx[kBatch], mx[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {  // reads (acc is used only where l > 0)
      const int i = i0 + u * stride;
      lx[u] = 0.f;
      mx[u] = 0.f;
      a[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < n && !p.fresh) {
        const int64_t row = bh_row0 + r0 + i / kVecs;
        lx[u] = p.l[row];
        mx[u] = p.m[row];
        a[u] = *reinterpret_cast<const float4*>(p.acc + row * D + (i % kVecs) * 4);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {  // writes
      const int i = i0 + u * stride;
      if (i >= n) break;
      const int64_t row = r0 + i / kVecs;
      const int c = (i % kVecs) * 4;
      const bool seen = lx[u] > 0.f;
      const float inv = seen ? 1.f / lx[u] : 0.f;
      const float4 o = seen ? make_float4(a[u].x * inv, a[u].y * inv, a[u].z * inv, a[u].w * inv)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
      uint2 packed;
      packed.x = pack_bf16(o.x, o.y);
      packed.y = pack_bf16(o.z, o.w);
      *reinterpret_cast<uint2*>(p.out + ((b * p.Nq + row) * p.H + h) * D + c) = packed;
      if (c == 0) p.lse[bh_row0 + row] = seen ? (mx[u] + log2f(lx[u])) * kLn2 : -INFINITY;
    }
  }
}

}  // namespace
}  // namespace cuda
}  // namespace rt
