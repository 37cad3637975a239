// Shape checks, mask resolution and scratch shared by the CPU attention ops (kernels/cpu/attn_*.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/attention_shapes.h"
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

// Checks q (B,Nq,H,D) and k, v (B,Nk,Hkv,D): f32 host tensors, H a multiple of Hkv.
inline AttnDims attn_dims(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  require_cpu_f32(q, op, "q");
  require_cpu_f32(k, op, "k");
  require_cpu_f32(v, op, "v");
  return attn_shape_dims(q, k, v, op);
}

// Number of keys j in [j0, j0 + nj) visible to query row i (visible keys form a prefix of the tile).
inline int64_t attn_visible_keys(const AttnMask& mask, int64_t i, int64_t j0, int64_t nj) {
  if (!mask.causal) return nj;
  const int64_t last = mask.q_offset + i - mask.k_offset;  // largest visible j
  const int64_t n = last - j0 + 1;
  return n < 0 ? 0 : (n > nj ? nj : n);
}

// Document mask (AttnMask::docs) on one tile of query rows [i0, i0+tq) x key rows [j0, j0+nj) of sample b,
// classified by the minimum and maximum of the positions over the tile:
//   skip:    no pair visible (every key after every query, or before every query's document start);
//   full:    every pair visible (every key inside every query's [doc_start, pos]);
//   partial: decided pair by pair by attn_doc_tile_visible.
enum class AttnTileClass { skip, full, partial };

struct AttnDocQueryTile {
  int64_t min_pos, max_pos, min_start, max_start;
};

inline AttnDocQueryTile attn_doc_query_tile(const AttnDocs& docs, int64_t b, int64_t i0, int64_t tq) {
  const int64_t* qp = docs.q_pos + b * docs.q_stride + i0;        // (tq)
  const int64_t* qs = docs.q_doc_start + b * docs.q_stride + i0;  // (tq)
  AttnDocQueryTile t{qp[0], qp[0], qs[0], qs[0]};
  for (int64_t r = 1; r < tq; ++r) {
    t.min_pos = std::min(t.min_pos, qp[r]);
    t.max_pos = std::max(t.max_pos, qp[r]);
    t.min_start = std::min(t.min_start, qs[r]);
    t.max_start = std::max(t.max_start, qs[r]);
  }
  return t;
}

inline AttnTileClass attn_doc_tile_class(const AttnDocs& docs, const AttnDocQueryTile& qt, int64_t b, int64_t j0,
                                         int64_t nj) {
  const int64_t* kp = docs.k_pos + b * docs.k_stride + j0;  // (nj)
  int64_t kmin = kp[0], kmax = kp[0];
  for (int64_t c = 1; c < nj; ++c) {
    kmin = std::min(kmin, kp[c]);
    kmax = std::max(kmax, kp[c]);
  }
  if (kmin > qt.max_pos || kmax < qt.min_start) return AttnTileClass::skip;
  if (kmax <= qt.min_pos && kmin >= qt.max_start) return AttnTileClass::full;
  return AttnTileClass::partial;
}

// vis (tq, kAttnTileK): 1 where key j0+c is visible to query i0+r of sample b, else 0.
inline void attn_doc_tile_visible(const AttnDocs& docs, int64_t b, int64_t i0, int64_t tq, int64_t j0, int64_t nj,
                                  uint8_t* vis) {
  const int64_t* qp = docs.q_pos + b * docs.q_stride + i0;        // (tq)
  const int64_t* qs = docs.q_doc_start + b * docs.q_stride + i0;  // (tq)
  const int64_t* kp = docs.k_pos + b * docs.k_stride + j0;        // (nj)
  for (int64_t r = 0; r < tq; ++r)
    for (int64_t c = 0; c < nj; ++c) vis[r * kAttnTileK + c] = uint8_t(qs[r] <= kp[c] && kp[c] <= qp[r]);
}

// What the key loop does with key tile [j0, j0+nj) for query rows [i0, i0+tq) of sample b (qtile: their summary,
// used only with documents): run it with `mask` and, for a document tile with an edge inside, the pair-by-pair
// `vis` (filled into vis_buf); skip it (documents: keys need not be sorted, a later tile may be visible); or stop
// the loop (causal: this and later tiles are past the diagonal). A wholly visible document tile runs `unmasked`.
enum class AttnKeyTileStep { run, skip, stop };
struct AttnKeyTile {
  AttnKeyTileStep step;
  const AttnMask* mask;
  const uint8_t* vis;  // (tq, kAttnTileK) or null
};
inline AttnKeyTile attn_key_tile(const AttnMask& mask, const AttnMask& unmasked, const AttnDocQueryTile& qtile,
                                 int64_t b, int64_t i0, int64_t tq, int64_t j0, int64_t nj, uint8_t* vis_buf) {
  if (!mask.docs.on())
    return {attn_visible_keys(mask, i0 + tq - 1, j0, nj) == 0 ? AttnKeyTileStep::stop : AttnKeyTileStep::run, &mask,
            nullptr};
  switch (attn_doc_tile_class(mask.docs, qtile, b, j0, nj)) {
    case AttnTileClass::skip: return {AttnKeyTileStep::skip, &unmasked, nullptr};
    case AttnTileClass::full: return {AttnKeyTileStep::run, &unmasked, nullptr};
    case AttnTileClass::partial: break;
  }
  attn_doc_tile_visible(mask.docs, b, i0, tq, j0, nj, vis_buf);
  return {AttnKeyTileStep::run, &unmasked, vis_buf};
}

// Checks the document mask's arrays against the row counts (the CPU backend reads them on the host).
inline void check_attn_docs(const AttnDocs& docs, int64_t Nq, int64_t Nk, const char* op) {
  if (!docs.on()) return;
  RT_CHECK(docs.q_doc_start != nullptr && docs.k_pos != nullptr,
           op << ": document mask needs q_pos, q_doc_start and k_pos (one of them is null)");
  RT_CHECK(docs.q_stride >= Nq && docs.k_stride >= Nk,
           op << ": document mask strides (" << docs.q_stride << ", " << docs.k_stride << ") are shorter than the "
              << Nq << " query / " << Nk << " key rows");
}

// Grow-only per-thread scratch (allocated once per thread and size, never per element).
inline float* attn_scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace cpu
}  // namespace rt
