// bwd v5's unit list (kernels/cuda/attention/attn_bwd_sm90ws.cu): the items and units the persistent CTAs fetch, how
// every role decodes a unit from its index, and the unit ring they read it from. Included by attn_bwd_sm90ws.cu and
// attn_bwd_sm90ws_docs.cuh only; keep C++17.
#pragma once
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_params.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"

namespace rt {
namespace cuda {
namespace wgbwd {

// bwd v5's list of units: items (one key tile of one (batch, K/V head) pair, bh = b * Hkv + hk) in windows of
// `window` pairs: window w holds pairs [w window, (w + 1) window) key tile by key tile (the pairs fastest), so
// within a window the causal items, largest at key tile 0, start largest first, and a window's Q / dO / dQ stay
// in L2. Unit u < full_items is item u whole; with pieces > 1 the units after those split each remaining item
// (the last, partial wave of a list of equal items) into `pieces` ranges of its iterations, which add their
// partial dK / dV with TMA reduces, so the last wave no longer leaves most SMs idle while a few items run. The
// persistent CTAs take the units in list order.
struct BwdV5Grid {
  int64_t n_kt;        // key tiles per (batch, K/V head)
  int64_t n_bh;        // (batch, K/V head) pairs
  int64_t window;      // pairs per window (1: pair by pair, key tile fastest)
  int64_t full_items;  // items run whole, one per CTA
  int pieces;          // > 1: units past full_items are pieces of the remaining items; else none are split
  int64_t units;       // full_items + the pieces: the units the CTAs fetch
  int64_t ctas;        // CTAs launched (at most one per SM); unit c < ctas is CTA c's first
};

struct BwdItem {
  int64_t kt, hk, b;
};
__device__ __forceinline__ BwdItem bwd_item(const BwdV5Grid& g, int64_t Hkv, int64_t item) {
  const int64_t per_window = g.window * g.n_kt, w = item / per_window, rem = item % per_window;
  const int64_t width = g.n_bh - w * g.window < g.window ? g.n_bh - w * g.window : g.window;
  const int64_t bh = w * g.window + rem % width;
  return BwdItem{rem / width, bh % Hkv, bh / Hkv};
}

// One unit of bwd v5's work, as every role decodes it from its index: an item (one key tile of one (batch, K/V
// head) pair), or with pieces > 1 past full_items one piece of an item's iterations.
struct BwdUnit {  // 32-bit: the launcher checks that k_end, q_end and H fit (TMA coordinates are 32-bit)
  int kt, hk, b, k0, q_first;
  int n_qt, it_begin, n_iter;  // n_iter == 0: no query sees these keys
  bool piece;
};
// kDocs: `span` is the unit's {first, last} query summary tile with a visible pair (DocMaskDev::k128_span; first >
// last: none), and the unit visits only those query tiles; without kDocs it is unused. R: query rows per tile (128
// only without documents: kV5WideRows).
template <bool kDocs = false, int R = kBr>
__device__ __forceinline__ BwdUnit bwd_unit(const AttnBwdParams& p, const BwdV5Grid& grid, int64_t u,
                                            int2 span = int2{0, 0}) {
  BwdUnit x;
  x.piece = u >= grid.full_items;
  const int64_t item = x.piece ? grid.full_items + (u - grid.full_items) / grid.pieces : u;
  const BwdItem w = bwd_item(grid, p.Hkv, item);
  x.kt = int(w.kt);
  x.hk = int(w.hk);
  x.b = int(w.b);
  const int64_t k0 = p.k_begin + w.kt * kBc;
  static_assert(R == kBr || !kDocs, "bwd v5: documents take 64-row query tiles");
  int64_t q_first = first_query_tile_row<R>(p, k0), q_stop = p.q_end;
  if constexpr (kDocs) {  // summary tiles and query tiles are both 64 rows from q_begin
    q_first = span.x > span.y ? p.q_end : p.q_begin + int64_t(span.x) * kBr;
    q_stop = min(p.q_end, p.q_begin + int64_t(span.y + 1) * kBr);
  }
  x.k0 = int(k0);
  x.q_first = int(q_first);
  x.n_qt = x.it_begin = x.n_iter = 0;
  if (q_first >= q_stop) return x;
  x.n_qt = int((q_stop - q_first + R - 1) / R);
  // This unit's iterations [it_begin, it_begin + n_iter) of the item's group * n_qt (query head, query tile) pairs.
  const int item_iters = int(p.group) * x.n_qt;
  const int part = x.piece ? int((u - grid.full_items) % grid.pieces) : 0, parts = x.piece ? grid.pieces : 1;
  x.it_begin = int(int64_t(part) * item_iters / parts);
  x.n_iter = int(int64_t(part + 1) * item_iters / parts) - x.it_begin;
  return x;
}

// Every role's next unit, from the producer's 2-slot ring (fetch f in slot f & 1; -1: none left). Lane 0 of each
// reading warp releases the slot once the whole warp has read it.
__device__ __forceinline__ int read_unit(const int* slots, uint32_t unit_full_bar, uint32_t unit_empty_bar, int f,
                                         int lane) {
  const uint32_t s = uint32_t(f & 1);
  mbar_wait(unit_full_bar + 8 * s, uint32_t(f >> 1) & 1u);
  const int u = *reinterpret_cast<const volatile int*>(slots + s);
  __syncwarp();
  if (lane == 0) mbar_arrive(unit_empty_bar + 8 * s);
  return u;
}

}  // namespace wgbwd
}  // namespace cuda
}  // namespace rt
