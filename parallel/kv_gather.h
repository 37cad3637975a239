// The gather scheme for packed documents (DESIGN.md "Document masks"), after MagiAttention's group-cast: instead of
// passing K/V blocks around the ring step by step, every rank receives from every other rank exactly the key rows
// that some query of its own sees (one all-to-all-v), in position order, and runs two attention calls: its queries
// against its own keys (while the exchange is in flight) and against the received rows. The backward runs the same
// two calls and returns each received row's dK/dV to the rank that holds it (the reverse exchange, summed there).
// No ring step waits for another rank's call: a rank's time is its own two calls, so what the layout must balance is
// each rank's total mask area, not each step's (parallel/doc_dispatch.h's greedy does that).
//
// Every rank computes the same plan from the sample's positions, as the ring's hop plan (parallel/ring_hops.h).
// Host only: RingAttention runs it, the chooser (parallel/doc_balance.h) prices it, bench_doc_ring_steps measures it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel/ring_spans.h"
#include "parallel/ring_tile_cost.h"
#include "parallel/ring_time_model.h"

namespace rt {

// A run of key rows one rank receives: `len` rows of rank `source`, its local rows [src_row, src_row + len), which
// hold the consecutive positions [pos, pos + len); they land in the receiver's gathered buffer at rows
// [dst_row, dst_row + len).
struct KvGatherPiece {
  int source = 0;
  int64_t src_row = 0, dst_row = 0, len = 0, pos = 0;
  bool operator==(const KvGatherPiece& o) const {
    return source == o.source && src_row == o.src_row && dst_row == o.dst_row && len == o.len && pos == o.pos;
  }
};

struct KvGatherPlan {
  int cp = 1;
  int64_t n = 0;  // tokens per rank
  // (cp) per receiving rank, its pieces in position order: its gathered buffer, rows [0, recv_rows[r]), holds the
  // keys of other ranks that some of its queries see, with increasing positions. Its own keys are not in it.
  std::vector<std::vector<KvGatherPiece>> pieces;
  std::vector<int64_t> recv_rows;  // (cp) rows rank r receives
  std::vector<int64_t> send_rows;  // (cp) rows rank s sends, summed over its receivers
  // (cp*cp) rows[r*cp + s]: rows rank r receives from rank s (0 on the diagonal).
  std::vector<int64_t> rows;

  int64_t max_recv_rows() const;
  int64_t total_rows() const;  // summed over the ranks
  // Bytes per layer, forward + backward, summed over the ranks: the forward's gather, the backward's gather again
  // and the dK/dV return; kv_row_bytes and dkv_row_bytes are the K+V bytes of one row and their gradients' on the wire.
  double bytes_per_layer(double kv_row_bytes, double dkv_row_bytes) const;
};

// From a sample's document_begins (parallel/ring_spans.h) and an assignment as spans in position order (each rank's
// positions increase along its local rows, as every layout of balanced gives). A query at position p of document
// [b, e) sees the keys [b, p], so a rank needs, per document it holds, the keys from the document's first position
// to its last query in it. O(#spans log #spans + #pieces).
KvGatherPlan kv_gather_plan_for_spans(const std::vector<int64_t>& begins, const std::vector<RingSpan>& spans, int cp);

// One sample given by position: doc_start (T) by position, order (T) a ring order whose ranks' positions increase.
KvGatherPlan kv_gather_plan_for_order(const std::vector<int64_t>& doc_start, const std::vector<int64_t>& order, int cp);

// The positions of rank r's gathered rows, in buffer order (recv_rows[r]): what the receiving call's k_pos holds.
std::vector<int64_t> kv_gather_positions(const KvGatherPlan& plan, int r);

// The fewest key rows a gathered call gets: a rank receiving fewer pads its buffer to this many with invisible rows
// (zero K/V at position T) when it can, so the call takes the fused one-kernel form on an H100/H200, which needs 128
// key rows (kernels/cuda/attention/attn_fwd_fused.cu); otherwise the call falls back to reset + block + finalize
// over the state of all its query rows. Padded rows cost nothing: their tiles are skipped like any invisible key.
constexpr int64_t kGatherMinCallKeyRows = 128;
inline int64_t gather_call_key_rows(int64_t received, int64_t capacity) {
  return received > 0 ? std::min(capacity, std::max(received, kGatherMinCallKeyRows)) : 0;
}

// The rows of one rank that see a gathered key: [lo, hi), the tightest range of its local rows i (positions
// q_pos[i], document starts q_doc_start[i], n rows) with some gathered position g (gathered_pos, increasing) in
// [q_doc_start[i], q_pos[i]]; {0, 0} when none does. The gathered call runs on these rows only (parallel/
// gather_forward.h). O(n log R).
struct QueryRowRange {
  int64_t lo = 0, hi = 0;
  bool empty() const { return hi <= lo; }
};
QueryRowRange gathered_query_rows(const int64_t* q_pos, const int64_t* q_doc_start, int64_t n,
                                  const std::vector<int64_t>& gathered_pos);
// The union of two ranges (the hull: the samples of a batch share one range).
QueryRowRange row_range_union(const QueryRowRange& a, const QueryRowRange& b);

// The tile counts of the scheme's calls (the same classification as parallel/ring_tile_cost.h): own[r] is rank r's
// queries against its own keys (the ring's step 0), gathered[r] its queries against its gathered rows.
struct KvGatherTiles {
  RingTileCost own, gathered;  // each (cp*cp) with only the diagonal (r, r) filled: rank r's call
};
KvGatherTiles kv_gather_tiles(const std::vector<int64_t>& doc_start, const std::vector<RingSpan>& spans,
                              const KvGatherPlan& plan, int cp);

// Predicted time of the gather scheme (the terms of parallel/ring_time_model.h, the same NVLink model):
//   exchange C = hop_latency + max over ranks of max(rows received, rows sent) x row bytes / bytes_per_us
//   forward  = max over r of max(own_r, C_kv) + gathered_r          (the exchange runs during the own call)
//   backward = max over r of max(own'_r, C_kv) + gathered'_r + C_dkv (the gradients' return is exposed)
// A rank with nothing to receive runs its own call alone. ideal_* are whole / cp, as the ring's.
// The calls (parallel/gather_forward.h): forward own_r = attn_fwd_whole over the own keys, finalize of every row
// included (the kernel model prices a whole call as its tiles; the fused kernel finalizes in its epilogue);
// gathered_r = the gathered call on the query rows it reaches, then attn_fwd_merge of those rows: the kernel model
// counts its key tiles and the query tiles that visit one, which is that call (no pass over the other rows' state
// any more); the merge, one read of those rows' two outputs and a write of one, is left out of the model and
// measured with the gathered call in bench_doc_ring_steps. Backward: the own and gathered attn_bwd_block_fresh.
RingTimePrediction predict_gather_time(const KvGatherTiles& tiles, const KvGatherPlan& plan, const RingTileCost& whole,
                                       const RingShape& shape, const LinkModel& link = {});

// The exchange term C of the formula above: one all-to-all-v of the plan's rows, K and V (gradients false) or their
// dK / dV (true), bounded by the busiest rank's rows one way; 0 when no rank receives anything. Microseconds.
double gather_exchange_us(const KvGatherPlan& plan, const RingShape& shape, bool gradients, const LinkModel& link = {});

// Per-rank call times of the gather scheme in microseconds, (cp) each; 0 where a call does not run (a rank that
// receives nothing runs no gathered call).
struct GatherCallTimes {
  std::vector<double> own_fwd, gathered_fwd, own_bwd, gathered_bwd;
};

// The formula of predict_gather_time applied to any call times (the kernel model's there, measured ones in
// bench_doc_ring_steps): fwd_us / bwd_us with the exchanges, fwd_compute_us / bwd_compute_us without them (max over
// ranks of own + gathered), and the bytes; ideal_fwd_us / ideal_bwd_us are left 0 for the caller.
RingTimePrediction gather_time_from_calls(const GatherCallTimes& calls, const KvGatherPlan& plan,
                                          const RingShape& shape, const LinkModel& link = {});

}  // namespace rt
