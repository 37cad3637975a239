// bwd v5 with a document mask (the kDocs instantiation of attn_bwd_sm90ws.cu; the mask:
// kernels/cuda/attention/attn_doc_mask.cuh). Without documents none of this is compiled into the kernel.
//   * before the kernel, attn_doc_k128_spans writes per 128-key tile of each sample the span of 64-row query
//     summary tiles that see one of its keys; the producer loads its unit's span (one load) and publishes it with
//     the unit in the unit ring, so every role visits only those query tiles and a unit with an empty span does
//     nothing (dK / dV untouched, or zeros stored when overwriting: the same contract as an unmasked key tile that
//     no query sees);
//   * the docs warp (warpgroup 2, warp 2, otherwise idle) fills, one stage ahead with the producer, each Q / dO
//     stage's query rows as 16-bit offsets of doc(i) and pos(i) from the unit's smallest key position, and the
//     stage's class bits: bit w set when warpgroup w's 64 keys are visible to every row (that pair runs the
//     unmasked code), bit 2 (kDocClassWide) when the unit's keys span more than kDocRel positions (offsets would
//     not be exact: the element mask then reads the positions from global memory). It arrives on the stage's
//     full barrier with the producer's 32 lanes, so a consumer's wait for Q / dO also covers these, and the
//     consumers read one shared word per tile and never wait on a global load inside the loop;
//   * each consumer thread holds its two keys as offsets from the same base (loaded once per unit, before the
//     K / V wait) and zeroes P^T where the row's [doc, pos] excludes the key.
// Deterministic mode (turn counters) is not taken: a key tile must visit every query tile in order there, so the
// dispatcher runs bwd v4 (attn_bwd_dispatch.cu). Keep C++17.
#pragma once
#include <climits>

#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_layout.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_list.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90ws_units.cuh"
#include "kernels/cuda/attention/attn_doc_mask.cuh"

namespace rt {
namespace cuda {
namespace wgbwd {

// Key offsets from the unit's base up to kDocRel are exact against row offsets clamped to int16: a clamped row
// value keeps its order with every offset in [0, kDocRel].
constexpr int64_t kDocRel = 32766;
constexpr uint32_t kDocClassWide = 4;  // class bit 2: the unit's keys are too far apart for 16-bit offsets

// The document regions of bwd v5's shared memory (WgBwdV5Smem kDocRows / kDocClass / kDocSpans).
struct BwdV5DocShared {
  uint32_t* rows;  // (2 stages, 64 rows): int16 doc offset | int16 pos offset << 16 of each query row
  int4* info;      // (2 stages) class bits, the stage's first query row q0, the unit's first key k0, its sample b
  int2* spans;     // (2 unit-ring slots) the published unit's span
};

// The span of unit u's 128 keys (attn_doc_k128_spans): {first, last} query summary tile, first > last for none.
__device__ __forceinline__ int2 doc_unit_span(const AttnBwdParams& p, const BwdV5Grid& grid, int64_t u) {
  const int64_t item = u >= grid.full_items ? grid.full_items + (u - grid.full_items) / grid.pieces : u;
  const BwdItem w = bwd_item(grid, p.Hkv, item);
  return p.docs.k128_span[w.b * ((p.docs.nk_tiles + 1) / 2) + w.kt];
}

// read_unit (attn_bwd_sm90ws_units.cuh) that also reads the unit's span from the ring before releasing the slot.
__device__ __forceinline__ int read_unit_span(const int* slots, const int2* spans, uint32_t unit_full_bar,
                                              uint32_t unit_empty_bar, int f, int lane, int2& span) {
  const uint32_t s = uint32_t(f & 1);
  mbar_wait(unit_full_bar + 8 * s, uint32_t(f >> 1) & 1u);
  const int u = *reinterpret_cast<const volatile int*>(slots + s);
  const volatile int* sp = reinterpret_cast<const volatile int*>(spans + s);
  span = make_int2(sp[0], sp[1]);
  __syncwarp();
  if (lane == 0) mbar_arrive(unit_empty_bar + 8 * s);
  return u;
}

// The smallest key position of the unit's 128 keys (the base of every offset).
__device__ __forceinline__ int64_t doc_key_base(const AttnBwdParams& p, const BwdUnit& w) {
  return doc_k_range(p.docs, w.b, 2 * w.kt, 2).pos_lo;
}

__device__ __forceinline__ uint32_t doc_rel16(int64_t x) {
  return uint32_t(uint16_t(int16_t(x < -32768 ? -32768 : x > 32767 ? 32767 : x)));
}

// The key range of warpgroup `half`'s 64 keys of the unit: from the summaries, or in list mode from the positions.
template <bool kList>
__device__ __forceinline__ DocRange unit_key_range(const AttnBwdParams& p, const BwdUnit& w, int half, int lane) {
  if constexpr (kList) return list_key_range(p, w, half, lane);
  else return doc_k_range(p.docs, w.b, 2 * w.kt + half, 1);
}

// The docs warp: per unit with work, per iteration (the producer's stage order), the stage's row offsets and
// class bits, then one arrival per lane on the stage's full barrier. kList: the unit and its stages from the work
// list (attn_bwd_sm90ws_list.cuh).
template <bool kList = false>
__device__ __forceinline__ void bwd_v5_docs_warp(const AttnBwdParams& p, const BwdV5Grid& grid, const BwdV5Shared& sh,
                                                 const BwdV5DocShared& ds, const BwdWorkListDev& wl, int lane) {
  uint32_t J = 0;  // stages so far (as the producer counts them)
#pragma unroll 1
  for (int f = 0;; ++f) {
    int2 span;
    const int u = read_unit_span(sh.unit_slots, ds.spans, sh.unit_full_bar, sh.unit_empty_bar, f, lane, span);
    if (u < 0) break;
    BwdUnit w;
    if constexpr (kList) w = bwd_list_unit(p, wl, grid, u, span.x);
    else w = bwd_unit<true>(p, grid, u, span);
    if (w.n_iter == 0) continue;
    const DocRange k0 = unit_key_range<kList>(p, w, 0, lane), k1 = unit_key_range<kList>(p, w, 1, lane);
    const int64_t base = min(k0.pos_lo, k1.pos_lo);  // k1 is empty (LLONG_MAX, LLONG_MIN) past k_end
    const bool wide = max(k0.pos_hi, k1.pos_hi) - base > kDocRel;
    // Each warpgroup's key range as 16-bit offsets (an empty one: lo 32767, hi -32768, seen by every row).
    const int lo0 = int16_t(doc_rel16(k0.pos_lo - base)), hi0 = int16_t(doc_rel16(k0.pos_hi - base));
    const bool k1_empty = k1.pos_lo > k1.pos_hi;
    const int lo1 = k1_empty ? 32767 : int16_t(doc_rel16(k1.pos_lo - base));
    const int hi1 = k1_empty ? -32768 : int16_t(doc_rel16(k1.pos_hi - base));
    const int64_t* q_pos = p.docs.q_pos + int64_t(w.b) * p.docs.q_stride;
    const int64_t* q_doc = p.docs.q_doc + int64_t(w.b) * p.docs.q_stride;
    BwdListCursor cur;
    if constexpr (kList) cur.begin(p, wl, grid, w);
#pragma unroll 1
    for (int j = 0; j < w.n_iter; ++j, ++J) {
      const uint32_t st = J & 1u;
      if (J >= 2) mbar_wait(sh.empty_bar + 8 * st, ((J >> 1) - 1u) & 1u);
      int q0;
      if constexpr (kList) {
        q0 = cur.q0;
        cur.next();
      } else {
        q0 = w.q_first + ((w.it_begin + j) % w.n_qt) * kBr;
      }
      bool full0 = !wide, full1 = !wide;  // wide: every pair takes the (global) element mask
#pragma unroll
      for (int r = lane; r < kBr; r += 32) {
        uint32_t word = 0x80007fffu;  // rows past q_end: doc offset 32767, pos offset -32768 (no key)
        if (q0 + r < p.q_end) {
          word = doc_rel16(q_doc[q0 + r] - base) | doc_rel16(q_pos[q0 + r] - base) << 16;
          const int doc = int16_t(word & 0xffffu), pos = int(word) >> 16;  // exact against [0, kDocRel]
          full0 = full0 && doc <= lo0 && hi0 <= pos;
          full1 = full1 && doc <= lo1 && hi1 <= pos;
        }
        ds.rows[st * kBr + r] = word;
      }
      full0 = __all_sync(0xffffffffu, full0);
      full1 = __all_sync(0xffffffffu, full1);
      const uint32_t cls = (full0 ? 1u : 0u) | (full1 ? 2u : 0u) | (wide ? kDocClassWide : 0u);
      if (lane == 0) ds.info[st] = make_int4(int(cls), q0, w.k0, w.b);
      mbar_arrive(sh.full_bar + 8 * st);  // release: the rows and the class are visible to the consumers' wait
    }
  }
}

// A consumer thread's two keys (tile rows krow0, krow0 + 8 of the unit) as offsets from the unit's base, packed as
// 16 bits each (exact unless the unit is wide, where they are not used). Loaded once per unit.
// kList: the base from the positions (list_key_base, by each consumer warp: lane = its lane), the docs warp's base.
template <bool kList = false>
__device__ __forceinline__ uint32_t doc_thread_keys(const AttnBwdParams& p, const BwdUnit& w, int krow0,
                                                    int lane = 0) {
  int64_t base;
  if constexpr (kList) base = list_key_base(p, w, lane);
  else base = doc_key_base(p, w);
  const int64_t* k_pos = p.docs.k_pos + int64_t(w.b) * p.docs.k_stride;
  const int64_t key0 = int64_t(w.k0) + krow0;
  return doc_rel16(k_pos[min(key0, p.k_end - 1)] - base) | doc_rel16(k_pos[min(key0 + 8, p.k_end - 1)] - base) << 16;
}

// The element mask of consumer warpgroup wg's (64 keys x 64 queries) pair of stage st unless its class bit says
// every pair is visible: zeroes P^T (compute_pt's layout) where query row nt*8 + 2t + e of the stage does not see
// key krow0 + 8r. Everything it reads is in the stage (written by the docs warp before the stage's full barrier),
// so nothing of it stays live across the loop; a wide unit reads the positions from global memory.
__device__ __forceinline__ void doc_mask_stage(float (&s)[32], const BwdV5DocShared& ds, uint32_t st, int wg,
                                               uint32_t kr, const AttnBwdParams& p, int krow0, int t) {
  const volatile int* vi = reinterpret_cast<const volatile int*>(ds.info + st);
  const int4 info = make_int4(vi[0], vi[1], vi[2], vi[3]);
  if ((uint32_t(info.x) >> wg) & 1u) return;  // warpgroup-uniform
  if (uint32_t(info.x) & kDocClassWide) {
    const int64_t* k_pos = p.docs.k_pos + int64_t(info.w) * p.docs.k_stride;
    const int64_t key0 = int64_t(info.z) + krow0;
    const int64_t kpos[2] = {k_pos[min(key0, p.k_end - 1)], k_pos[min(key0 + 8, p.k_end - 1)]};
    doc_mask_pt(s, p, info.w, info.y, kpos, t);
    return;
  }
  const int k_a = int(kr & 0xffffu), k_b = int(kr >> 16);  // in [0, kDocRel]
  const uint32_t* rows = ds.rows + st * kBr;
#pragma unroll
  for (int nt = 0; nt < kBr / 8; ++nt) {
    const uint2 pair = *reinterpret_cast<const uint2*>(rows + nt * 8 + 2 * t);  // rows nt*8 + 2t, + 1
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const uint32_t word = e ? pair.y : pair.x;
      const int doc = int(int16_t(uint16_t(word & 0xffffu))), pos = int(word) >> 16;
      if (k_a < doc || k_a > pos) s[nt * 4 + e] = 0.f;
      if (k_b < doc || k_b > pos) s[nt * 4 + 2 + e] = 0.f;
    }
  }
}

}  // namespace wgbwd
}  // namespace cuda
}  // namespace rt
