// The gather scheme for packed documents (DESIGN.md "Document masks"), after MagiAttention's group-cast: instead of
// passing K/V blocks around the ring step by step, every rank receives from every other rank exactly the key rows
// that some query of its own sees (one all-to-all-v), in position order, and runs two attention calls: its queries
// against its own keys (while the exchange is in flight) and against the received rows. The backward runs the same
// two calls and returns each received row's dK/dV to the rank that holds it (the reverse exchange, summed there).
// No ring step waits for another rank's call: a rank's time is its own two calls, so what the layout must balance is
// each rank's total mask area, not each step's (parallel/schedule/doc_dispatch.h's greedy does that).
// The backward hides the return too: the own call is split in two ranges of the rank's own keys, part A before the
// gathered call (under the K/V exchange) and part B after the return is posted (under the return); where to split is
// chosen per rank and batch on the host (choose_own_bwd_split below, parallel/cp/gather_backward.h runs the parts).
//
// Every rank computes the same plan from the sample's positions, as the ring's hop plan
// (parallel/schedule/ring_hops.h).
// Host only: RingAttention runs it, the chooser (parallel/schedule/doc_balance.h) prices it, bench_doc_ring_steps
// measures it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel/schedule/ring_spans.h"
#include "parallel/schedule/ring_tile_cost.h"
#include "parallel/schedule/ring_time_model.h"

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

// From a sample's document_begins (parallel/schedule/ring_spans.h) and an assignment as spans in position order (each
// rank's
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

// The tile counts of the scheme's calls (the same classification as parallel/schedule/ring_tile_cost.h): own[r] is rank
// r's
// queries against its own keys (the ring's step 0), gathered[r] its queries against its gathered rows.
// own_key_tile_pairs[r]: the own call's visible pairs per 128-row key tile of rank r, its rows in position order
// (the sums of add_own_key_pairs over each tile, computed per document piece), what the backward's split is chosen
// from.
struct KvGatherTiles {
  RingTileCost own, gathered;  // each (cp*cp) with only the diagonal (r, r) filled: rank r's call
  std::vector<std::vector<int64_t>> own_key_tile_pairs;  // (cp) of (ceil(n / kOwnSplitKeyRows))
};
KvGatherTiles kv_gather_tiles(const std::vector<int64_t>& doc_start, const std::vector<RingSpan>& spans,
                              const KvGatherPlan& plan, int cp);

// ---- The own backward call in two parts: the dK/dV return hidden ----
// Backward on rank r: K/V exchange posted -> own part A -> wait -> gathered call -> dK/dV return posted -> own part B
// -> wait -> the returned rows added. Part A is the own call on the rank's own key rows [0, m), part B on [m, n)
// (parallel/cp/gather_backward.h), so A runs under the K/V exchange and B under the return, which one call before the
// gathered call left exposed. m is a multiple of kOwnSplitKeyRows (the kernels' key tile) with both parts at least
// that long; m = 0 is no split (one call, where part A runs).
constexpr int64_t kOwnSplitKeyRows = 128;

// Adds the own call's visible pairs per key row to pairs (n): with the document mask, own key row i is seen by the
// own query rows j of its document with pos[j] >= pos[i]. pos and doc_start (n): the rank's local rows of one sample,
// in any order; O(n) when the positions increase (a document's rows are then consecutive and row i's count is the
// last row of its document - i + 1), else O(n log n).
void add_own_key_pairs(const int64_t* pos, const int64_t* doc_start, int64_t n, std::vector<int64_t>& pairs);
// Per-row counts (n) summed over each kOwnSplitKeyRows-row key tile: (ceil(n / kOwnSplitKeyRows)).
std::vector<int64_t> key_tile_sums(const std::vector<int64_t>& key_pairs);

struct OwnBwdSplit {
  int64_t m = 0;              // part A = own key rows [0, m), part B = [m, n); 0: no split, one call (part A)
  double a_us = 0, b_us = 0;  // the parts' predicted times; b_us = 0 without a split (a_us is the whole call)
  bool split() const { return m > 0; }
};

// Where a rank splits its own backward call of n key rows. tile_pairs (ceil(n / kOwnSplitKeyRows)): its own call's
// visible pairs per key tile (key_tile_sums; summed over the batch's samples); own_us: the whole call's predicted
// time, call_us of it the per-call cost (the kernel model's call_us, parallel/schedule/ring_time_model.h), the rest
// proportional to the pairs, so a part of p of the P pairs costs
//   call_us + (own_us - call_us) p / P      (a split pays call_us once more).
// c_kv_us: the K/V exchange the rank waits on before its gathered call (0 when it receives nothing); c_dkv_us: the
// return it waits on at the end (0 when it neither sends nor receives a row).
// Rule: part B just covers the return: the largest m whose B >= c_dkv_us (the smallest m when no B does), A takes the
// rest; kept only where the model's time around the gathered call is shorter with it:
//   split  max(A, c_kv) + max(B, c_dkv)   <   one call  max(own, c_kv) + c_dkv.
// So no split when nothing returns (c_dkv_us = 0), when the own call is too short for a split to pay its extra call,
// when n < 2 kOwnSplitKeyRows or when no pair is visible. Pure and host-only; O(n / kOwnSplitKeyRows).
OwnBwdSplit choose_own_bwd_split(const std::vector<int64_t>& tile_pairs, int64_t n, double own_us, double call_us,
                                 double c_kv_us, double c_dkv_us);

// choose_own_bwd_split's inputs from the kernel model for rank r of a batch of `samples` samples that share one own
// call (RingAttention::plan_gather): tiles[b] and plans[b] of each sample, tile_pairs the pairs per key tile of the
// rank's local rows as they lie (add_own_key_pairs, key_tile_sums) summed over the samples; the exchanges are the
// batch's (its rows summed over the samples). own_us = call_us + the own call's tile terms over the samples.
OwnBwdSplit own_bwd_split_for_batch(const KvGatherTiles* tiles, const KvGatherPlan* plans, size_t samples, int r,
                                    const std::vector<int64_t>& tile_pairs, const RingShape& shape,
                                    const LinkModel& link = {});
// The same for one sample whose ranks hold increasing positions (tile_pairs = tiles.own_key_tile_pairs[r]): what
// predict_gather_time prices and bench_doc_ring_steps runs.
OwnBwdSplit predict_own_bwd_split(const KvGatherTiles& tiles, const KvGatherPlan& plan, int r, const RingShape& shape,
                                  const LinkModel& link = {});

// ---- The forward in one launch ----
// A rank may run its forward as one call over its own keys and its gathered rows as one key list
// (attn_fwd_whole_two_kv, parallel/cp/gather_forward.h) once the exchange is done, instead of the own call under the
// exchange and then the gathered call (+ merge): one launch saves a call's fixed cost (launch, set-up kernels,
// ramp and last wave, the merge) but leaves the exchange exposed. The kernel model prices the launch as both calls'
// tile terms with one call_us, so with own_us and gathered_us the two calls' predicted times and c_kv_us the
// exchange:
//   one launch  c_kv + own + gathered - call_us   <   two calls  max(own, c_kv) + gathered
// i.e. the exchange is shorter than one call's fixed cost (or the own call is). False where either call does not
// run (own_us or gathered_us 0).
inline bool gather_fwd_one_launch(double own_us, double gathered_us, double call_us, double c_kv_us) {
  if (own_us <= 0 || gathered_us <= 0) return false;
  return c_kv_us + own_us + gathered_us - call_us < std::max(own_us, c_kv_us) + gathered_us;
}

// The rule for rank r of a batch of `samples` samples that share one call each way (RingAttention::plan_gather):
// own_us and gathered_us the calls' gather_kernel_time_model times, their tile terms summed over the samples (one
// call_us each), c_kv the batch's exchange; false where the rank receives no row.
bool gather_fwd_one_launch_for_batch(const KvGatherTiles* tiles, const KvGatherPlan* plans, size_t samples, int r,
                                     const RingShape& shape, const LinkModel& link = {});

// ---- The backward in one launch ----
// The same for the backward: the own call (whole) and the gathered call as one attn_bwd_block_fresh_two_kv once the
// exchange is done (dK / dV of the own rows and of the gathered rows each to its own buffer). It saves a call's fixed
// cost (two where the own call is split) but leaves the exchange exposed, and the return: nothing runs under it.
// With split = the own call's parts (A, B; own = A + B - call_us where split, else A), gathered_us the gathered
// call's time, c_kv_us / c_dkv_us the exchange and the return:
//   one launch  c_kv + own + gathered - call_us + c_dkv   <   three calls  max(A, c_kv) + gathered + max(B, c_dkv)
// False where either call does not run (split.a_us or gathered_us 0).
inline double gather_bwd_own_whole_us(const OwnBwdSplit& split, double call_us) {
  return split.split() ? split.a_us + split.b_us - call_us : split.a_us;
}
inline bool gather_bwd_one_launch(const OwnBwdSplit& split, double gathered_us, double call_us, double c_kv_us,
                                  double c_dkv_us) {
  if (split.a_us <= 0 || gathered_us <= 0) return false;
  const double own = gather_bwd_own_whole_us(split, call_us);
  return c_kv_us + own + gathered_us - call_us + c_dkv_us <
         std::max(split.a_us, c_kv_us) + gathered_us + std::max(split.b_us, c_dkv_us);
}

// The rule for rank r of a batch (RingAttention::plan_gather), given its own call's split (own_bwd_split_for_batch):
// gathered_us the gathered call's gather_kernel_time_model time, its tile terms summed over the samples; false where
// the rank receives no row.
bool gather_bwd_one_launch_for_batch(const KvGatherTiles* tiles, const KvGatherPlan* plans, size_t samples, int r,
                                     const OwnBwdSplit& split, const RingShape& shape, const LinkModel& link = {});

// Predicted time of the gather scheme (the terms of parallel/schedule/ring_time_model.h, the same NVLink model):
//   exchange C = hop_latency + max over ranks of max(rows received, rows sent) x row bytes / bytes_per_us
//   forward  = max over r of max(own_r, C_kv) + gathered_r                        (the exchange runs during own)
//              or C_kv + one_r where the rank runs one launch (gather_fwd_one_launch; one_r = own_r + gathered_r -
//              call_us)
//   backward = max over r of max(A_r, C_kv) + gathered'_r + max(B_r, C_dkv)       (A, B: the own call's two parts)
//              or C_kv + one'_r + C_dkv where the rank runs one launch (gather_bwd_one_launch)
// A rank with nothing to receive runs its own call (or part A) alone, and one that neither receives nor sends waits
// for no return (its B term is B alone). A_r and B_r are predict_own_bwd_split's (B_r = 0 and A_r the whole own call
// where it does not split; a split adds one call_us). ideal_* are whole / cp, as the ring's.
// The calls (parallel/cp/gather_forward.h): forward own_r = attn_fwd_whole over the own keys, finalize of every row
// included (the kernel model prices a whole call as its tiles; the fused kernel finalizes in its epilogue);
// gathered_r = the gathered call on the query rows it reaches, then attn_fwd_merge of those rows: the kernel model
// counts its key tiles and the query tiles that visit one, which is that call (no pass over the other rows' state
// any more); the merge, one read of those rows' two outputs and a write of one, is left out of the model and
// measured with the gathered call in bench_doc_ring_steps. Backward: the own parts and the gathered
// attn_bwd_block_fresh.
RingTimePrediction predict_gather_time(const KvGatherTiles& tiles, const KvGatherPlan& plan, const RingTileCost& whole,
                                       const RingShape& shape, const LinkModel& link = {});

// The exchange term C of the formula above: one all-to-all-v of the plan's rows, K and V (gradients false) or their
// dK / dV (true), bounded by the busiest rank's rows one way; 0 when no rank receives anything. Microseconds.
double gather_exchange_us(const KvGatherPlan& plan, const RingShape& shape, bool gradients, const LinkModel& link = {});
// The same for a batch of `samples` plans exchanged at once (each rank's rows summed over the samples).
double gather_exchange_us(const KvGatherPlan* plans, size_t samples, const RingShape& shape, bool gradients,
                          const LinkModel& link = {});

// Per-rank call times of the gather scheme in microseconds, (cp) each; 0 where a call does not run (a rank that
// receives nothing runs no gathered call). The own backward in its two parts: own_bwd_a before the gathered call,
// own_bwd_b after the return is posted (0 where the rank does not split).
// one_fwd (cp, or empty): where > 0, the rank's forward is one launch of that time after the exchange
// (gather_fwd_one_launch), in place of own_fwd + gathered_fwd; one_bwd likewise the backward (gather_bwd_one_launch),
// in place of own_bwd_a + gathered_bwd + own_bwd_b, the return waited for after it.
struct GatherCallTimes {
  std::vector<double> own_fwd, gathered_fwd, own_bwd_a, own_bwd_b, gathered_bwd;
  std::vector<double> one_fwd, one_bwd;
};

// The per-rank call times predict_gather_time prices (one_fwd / one_bwd > 0 where a rank runs that direction in one
// launch).
GatherCallTimes predict_gather_calls(const KvGatherTiles& tiles, const KvGatherPlan& plan, const RingShape& shape,
                                     const LinkModel& link = {});

// The formula of predict_gather_time applied to any call times (the kernel model's there, measured ones in
// bench_doc_ring_steps): fwd_us / bwd_us with the exchanges, fwd_compute_us / bwd_compute_us without them (max over
// ranks of own + gathered, own = A + B backward), and the bytes; ideal_fwd_us / ideal_bwd_us are left 0 for the
// caller.
RingTimePrediction gather_time_from_calls(const GatherCallTimes& calls, const KvGatherPlan& plan,
                                          const RingShape& shape, const LinkModel& link = {});

}  // namespace rt
