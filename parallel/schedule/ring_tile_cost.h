// The attention tiles a ring of packed documents costs the CUDA kernels (DESIGN.md "Document masks"): for each
// (query rank r, key rank s) call, the (64-row query tile, 128-key tile) pairs of r's local rows against s's
// local rows that the kernels do not skip, classified as kernels/cuda/attention/attn_doc_mask.cuh does from the min / max
// of positions and document starts over each tile:
//   skipped  kmax < min doc or kmin > max pos          cost 0
//   full     kmin >= max doc and kmax <= min pos       cost 1 (runs unmasked)
//   partial  otherwise                                 cost kPartialTileCost (the element mask runs on it)
// plus kCallQueryTileCost per query tile and call that visits any key tile, and kCallCost per call.
// The kernels narrow each query tile's key loop to the span between its first and last non-skipped key tile;
// skipped tiles inside that span run with the element mask, so they cost as partial tiles here too (an order whose
// ranks hold increasing positions has no such tile). A call with no visible pair costs 0 (RingAttention skips it).
// Host only: the balanced layout's choice (parallel/schedule/doc_balance.h) and the benchmarks use it.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/schedule/layout.h"
#include "parallel/schedule/ring_spans.h"

namespace rt {

constexpr int64_t kCostQueryTileRows = 64;  // a consumer warpgroup's query rows (attn_fwd_sm90ws.cu, attn_bwd_sm90*.cu)
constexpr int64_t kCostKeyTileRows = 128;   // keys per K/V tile of the forward kernels (kWgKeysPerTile)
// The weights: a least-squares fit (of log whole/ring) to bench_doc_ring_steps on the H200, all nine samples of run 1
// in bench/results/2026-12-01-h200-doc-attention.md (cp = 8, forward, kernels of commit 274e1ee): measured
// 0.25-0.94, the model within 8% rms (worst 0.52 for 0.44); bench/results/2026-12-01-doc-imbalance.md lists them.
// Three weights from nine points: it ranks layouts, and the kernels have changed since (fb7486a made the element
// mask cheaper), so kPartialTileCost is likely high for today's forward.
// A partial tile (the element mask runs on it) costs kPartialTileCost full tiles.
constexpr double kPartialTileCost = 5.0;
// Per call, each query tile that visits any key tile: Q loaded, the fp32 ring state rows (m, l and the (64, D)
// accumulator) read and written by the resumable kernels.
constexpr double kCallQueryTileCost = 2.5;
// Per call that runs: launches, the document-mask summaries, the last wave's tail.
constexpr double kCallCost = 140.0;

struct RingTileCost {
  std::vector<double> tiles;  // (cp*cp): tiles[r*cp + s] = tile cost of rank r's queries against rank s's keys
  double critical = 0;        // sum over ring steps t of the max over ranks r of tiles[r][(r - t) mod cp]
  double total = 0;           // sum over all (r, s)
  std::vector<double> active;  // (cp*cp): query tiles of rank r with at least one key tile to visit in call (r, s)
  double tile_sum = 0;         // sum of the tiles alone (full + kPartialTileCost x partial), no per-call terms
  double full = 0, partial = 0;  // tile counts over all calls: full, and partial (skipped ones in a span included)
  double calls = 0;              // calls that run (a visible pair)
  // (cp*cp) per call: full tiles, and partial ones (skipped ones in a span included); with `active`, what the
  // time model (parallel/schedule/ring_time_model.h) prices. A call that does not run has all three 0 and runs[] 0.
  std::vector<double> full_tiles, partial_tiles;
  std::vector<uint8_t> runs;
};

// doc_start (T) by position; order (T) a ring order (rank 0's positions in its local order, then rank 1's, ...);
// pairs (cp*cp) the visible pairs per (r, s) (ring_pair_counts) or empty to count every call.
// O(T/64 log T) when every rank's positions increase (binary search of the key tiles), O(T^2 / 8192) otherwise.
RingTileCost ring_tile_cost(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp,
                            const std::vector<double>& pairs = {});

// The same counts for the order the spans give (parallel/schedule/ring_spans.h), doc_start (T) by position: each rank's
// positions increase, so a tile's extremes are its first and last rows and a query tile's key-tile bounds only
// move forward: O(#spans + cp T / 64), what balanced prices its candidates with.
RingTileCost ring_tile_cost_for_spans(const std::vector<int64_t>& doc_start, const std::vector<RingSpan>& spans,
                                      int cp, const std::vector<double>& pairs = {});

// Where each rank's tiles lie, which depends on the assignment only: per rank, the first and last position of each
// 64-row query tile and of each 128-key tile. From spans (T positions over cp ranks), or in closed form for a
// fixed layout (contiguous, zigzag, striped; no O(T) pass).
struct RingTileRows {
  std::vector<std::vector<int64_t>> query, key;  // (cp) each (2 * tiles): first, last position of every tile
};
RingTileRows ring_tile_rows(const std::vector<RingSpan>& spans, int64_t T, int cp);
RingTileRows ring_tile_rows(Layout layout, int64_t T, int cp);
RingTileCost ring_tile_cost_for_rows(const std::vector<int64_t>& doc_start, const RingTileRows& rows, int cp,
                                     const std::vector<double>& pairs = {});

// The tile cost of one whole call over the sample in position order (what one GPU runs).
double whole_tile_cost(const std::vector<int64_t>& doc_start);

}  // namespace rt
