// Shape checks, mask resolution and scratch shared by the CPU attention ops (kernels/cpu/attn_*.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "kernels/cpu/simd_exp2.h"

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

}  // namespace cpu
}  // namespace rt
