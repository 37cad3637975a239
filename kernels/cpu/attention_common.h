// Shape checks, mask resolution and scratch shared by the CPU attention ops (kernels/cpu/attn_*.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

// Tile sizes of the CPU flash attention: a block of kAttnTileQ query rows meets a block of kAttnTileK keys.
// 128x128 measured ~15% faster than 64x64 (N=2048, H=8, D=64, causal, one core, CPU time).
constexpr int64_t kAttnTileQ = 128;
constexpr int64_t kAttnTileK = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct AttnDims {
  int64_t B, Nq, Nk, H, Hkv, D, group;  // group = H / Hkv query heads per K/V head
};

// Checks q (B,Nq,H,D) and k, v (B,Nk,Hkv,D): f32 host tensors, H a multiple of Hkv.
inline AttnDims attn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  require_cpu_f32(q, op, "q");
  require_cpu_f32(k, op, "k");
  require_cpu_f32(v, op, "v");
  RT_CHECK(q.ndim == 4, op << ": q has shape " << q.shape_str() << ", expected (B,Nq,H,D)");
  RT_CHECK(k.ndim == 4, op << ": k has shape " << k.shape_str() << ", expected (B,Nk,Hkv,D)");
  AttnDims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], 1};
  check_shape(k, {d.B, d.Nk, d.Hkv, d.D}, op, "k (B,Nk,Hkv,D)");
  check_shape(v, {d.B, d.Nk, d.Hkv, d.D}, op, "v (B,Nk,Hkv,D)");
  RT_CHECK(d.Hkv > 0 && d.H % d.Hkv == 0,
           op << ": query heads H=" << d.H << " must be a multiple of K/V heads Hkv=" << d.Hkv);
  d.group = d.H / d.Hkv;
  return d;
}

// The mask's sub-ranges with end = -1 resolved, checked against the row counts.
struct AttnRanges {
  int64_t q_begin, q_end, k_begin, k_end;
};

inline AttnRanges attn_ranges(const AttnMask& mask, int64_t Nq, int64_t Nk, const char* op) {
  AttnRanges r{mask.q_begin, mask.q_end < 0 ? Nq : mask.q_end, mask.k_begin, mask.k_end < 0 ? Nk : mask.k_end};
  RT_CHECK(0 <= r.q_begin && r.q_begin <= r.q_end && r.q_end <= Nq,
           op << ": query range [" << mask.q_begin << "," << mask.q_end << ") is outside the " << Nq
              << " query rows");
  RT_CHECK(0 <= r.k_begin && r.k_begin <= r.k_end && r.k_end <= Nk,
           op << ": key range [" << mask.k_begin << "," << mask.k_end << ") is outside the " << Nk << " key rows");
  return r;
}

// Number of keys j in [j0, j0 + nj) visible to query row i (visible keys form a prefix of the tile).
inline int64_t attn_visible_keys(const AttnMask& mask, int64_t i, int64_t j0, int64_t nj) {
  if (!mask.causal) return nj;
  const int64_t last = mask.q_offset + i - mask.k_offset;  // largest visible j
  const int64_t n = last - j0 + 1;
  return n < 0 ? 0 : (n > nj ? nj : n);
}

// Grow-only per-thread scratch (allocated once per thread and size, never per element).
inline float* attn_scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// x[0:n] = exp2(x - shift), returning the sum. Eight lanes at a time: 2^x = 2^round(x) * p(x - round(x)),
// p a degree-6 polynomial on [-0.5, 0.5] (relative error ~2e-7); arguments below -126 give exactly 0.
// Callers pass x - shift <= ~0 (scores minus a running max or the LSE), never -inf.
typedef float attn_vec8 __attribute__((vector_size(32)));
typedef float attn_vec8u __attribute__((vector_size(32), aligned(4)));
typedef int32_t attn_ivec8 __attribute__((vector_size(32)));

// x = 2^x in place, lane by lane.
__attribute__((always_inline)) inline void attn_exp2_lanes(attn_vec8& x) {
  const attn_ivec8 tiny = x < -126.f;                                    // lanes that underflow to 0
  x = tiny ? attn_vec8{} - 126.f : x;
  const attn_vec8 xr = x + 0.5f;
  attn_ivec8 n = __builtin_convertvector(xr, attn_ivec8);                // trunc
  n += (__builtin_convertvector(n, attn_vec8) > xr);                     // -> floor(x + 0.5)
  const attn_vec8 f = x - __builtin_convertvector(n, attn_vec8);         // [-0.5, 0.5]
  attn_vec8 p = 1.535336188319500e-4f * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.f;
  const attn_ivec8 two_n = (n + 127) << 23;                              // bits of 2^n
  const attn_ivec8 r = __builtin_bit_cast(attn_ivec8, p * __builtin_bit_cast(attn_vec8, two_n));
  x = __builtin_bit_cast(attn_vec8, r & ~tiny);
}

__attribute__((always_inline)) inline float attn_exp2_shift(float* x, int64_t n, float shift) {
  attn_vec8 acc{};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    attn_vec8u* xv = reinterpret_cast<attn_vec8u*>(x + k);
    attn_vec8 e = *xv - shift;
    attn_exp2_lanes(e);
    *xv = e;
    acc += e;
  }
  float sum = 0.f;
  if (k < n) {
    alignas(32) float tail[8];
    for (int64_t t = 0; t < 8; ++t) tail[t] = k + t < n ? x[k + t] - shift : -1000.f;
    attn_vec8 e = *reinterpret_cast<const attn_vec8*>(tail);
    attn_exp2_lanes(e);
    for (int64_t t = 0; k + t < n; ++t) {
      x[k + t] = e[t];
      sum += e[t];
    }
  }
  for (int t = 0; t < 8; ++t) sum += acc[t];
  return sum;
}

}  // namespace cpu
}  // namespace rt
