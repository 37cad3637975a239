// The attention tiles a ring of packed documents costs the CUDA kernels (DESIGN.md "Document masks"): for each
// (query rank r, key rank s) call, the (64-row query tile, 128-key tile) pairs of r's local rows against s's
// local rows that the kernels do not skip, classified as kernels/cuda/attn_doc_mask.cuh does from the min / max
// of positions and document starts over each tile:
//   skipped  kmax < min doc or kmin > max pos          cost 0
//   full     kmin >= max doc and kmax <= min pos       cost 1 (runs unmasked)
//   partial  otherwise                                 cost kPartialTileCost (the element mask runs on it)
// plus kCallQueryTileCost per query tile and call that visits any key tile.
// The kernels narrow each query tile's key loop to the span between its first and last non-skipped key tile;
// skipped tiles inside that span run with the element mask, so they cost as partial tiles here too (an order whose
// ranks hold increasing positions has no such tile). A call with no visible pair costs 0 (RingAttention skips it).
// Host only: the balanced layout's choice (parallel/doc_balance.h) and the benchmarks use it.
#pragma once
#include <cstdint>
#include <vector>

namespace rt {

constexpr int64_t kCostQueryTileRows = 64;  // a consumer warpgroup's query rows (attn_fwd_ws.cu, attn_bwd_*.cu)
constexpr int64_t kCostKeyTileRows = 128;   // keys per K/V tile of the forward kernels (kWgKeysPerTile)
// Fitted by hand to bench_doc_ring_steps on the H200 (cp = 8, whole-call time / ring-calls-in-sequence time,
// forward, kernels of commit 274e1ee; bench/results/2026-12-01-doc-imbalance.md compares all nine samples): the
// weights 1.5 and 0 predicted 0.60-0.70 for striped where 0.25-0.45 was measured; with 4 and 1 the model gives
// 0.33-0.63 for striped (measured 0.25-0.45) and 0.93-0.99 for zigzag on one document (measured 0.63-0.94). The
// element mask of a document-edge tile costs far more than a full tile. Not modelled: each call's fixed launch
// and setup time, which is why 16K samples measure well below the model. A rough fit: it ranks layouts.
// A partial tile costs kPartialTileCost full tiles.
constexpr double kPartialTileCost = 4.0;

// Per call, each query tile with a key tile to visit also costs a fixed amount: Q loaded, the fp32 state rows
// (m, l and the (64, D) accumulator) read and written by the resumable ring kernels.
constexpr double kCallQueryTileCost = 1.0;

struct RingTileCost {
  std::vector<double> tiles;  // (cp*cp): tiles[r*cp + s] = tile cost of rank r's queries against rank s's keys
  double critical = 0;        // sum over ring steps t of the max over ranks r of tiles[r][(r - t) mod cp]
  double total = 0;           // sum over all (r, s)
  std::vector<double> active;  // (cp*cp): query tiles of rank r with at least one key tile to visit in call (r, s)
  double tile_sum = 0;         // sum of the tile costs alone (without the per-call query-tile cost)
};

// doc_start (T) by position; order (T) a ring order (rank 0's positions in its local order, then rank 1's, ...);
// pairs (cp*cp) the visible pairs per (r, s) (ring_pair_counts) or empty to count every call.
// O(T/64 log T) when every rank's positions increase (binary search of the key tiles), O(T^2 / 8192) otherwise.
RingTileCost ring_tile_cost(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp,
                            const std::vector<double>& pairs = {});

// The tile cost of one whole call over the sample in position order (what one GPU runs).
double whole_tile_cost(const std::vector<int64_t>& doc_start);

}  // namespace rt
