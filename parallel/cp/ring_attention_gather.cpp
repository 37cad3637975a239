// The gather scheme's calls of RingAttention (parallel/schedule/cp_scheme.h, DESIGN.md "Document masks"), a private
// part of
// the class: the plan of a batch's documents and the forward and backward passes; its buffers are in
// parallel/cp/gather_scheme.h. Only rt ops and the Comm touch tensor memory, so the same code runs on CPU ranks
// (MpiComm) and GPUs (NcclComm, or MpiComm staging through pinned host memory).
//
// Forward on rank r:
//   pack own K|V; gather the rows each peer needs into its chunk (send_index); post one exchange (a send and a
//   receive per peer with rows); own call: queries x own keys (attn_fwd_whole: out and lse of every row) while it
//   is in flight; wait; unpack the received chunks into the gathered buffer in position order, padding zeroed
//   (unpack_index); gathered call: the query rows [lo, hi) that see a gathered key (q_rows, from the plan) x the
//   gathered rows (document mask with the rows' positions) into out2 / lse2, merged into out / lse
//   (parallel/cp/gather_forward.h: no pass over the fp32 state of all rows). In one launch
//   (RingGather::fwd_one_launch): wait, unpack, one attn_fwd_work_list over the batch's work list (plan_gather builds
//   it; kernels/attn_work_list.h), the default; attn_fwd_whole_two_kv over own keys and gathered rows instead with
//   RT_ATTN_WORK_LIST=0, or where the list op cannot run the call (attn_fwd_work_list_runs: on CUDA, fwd v5's list
//   mode needs sm_90a, bf16, D 64 / 128 and 128 own and gathered rows). Both give the same bits. On CUDA ranks with
//   ready flags (RT_ATTN_READY_FLAGS=1, experimental) the list kernel goes first, over an own-first list, and the wait,
//   unpack and flag follow on a side stream (gather_forward_flagged); the same bits.
// Backward (recompute style: nothing is kept from the forward but O and LSE):
//   the same exchange again; own call part A (own keys [0, m)) backward into this rank's f32 dK|dV while it is in
//   flight; wait; unpack; gathered call backward into the gathered rows' f32 dK|dV; pack them into the chunks of their
//   owners (return_index, rounded to parallel.dkv_wire); post the reverse exchange; own call part B (own keys [m, n))
//   while it is in flight; wait; add each peer's chunk to this rank's dK|dV in peer order (scatter_add_rows with the
//   chunk's send_index: each own row at most once per chunk). dQ adds over the three calls (dq_acc_).
//   m (RingGather::own_split) is chosen in plan_gather, per rank and batch, from the kernel time model and the
//   exchanges (parallel/schedule/gather_plan.h own_bwd_split_for_batch): part B sized to cover the return, part A the
//   rest;
//   m = 0 runs the own call whole before the gathered call (no split: nothing returns, or too short an own call).
//   The parts' calls: parallel/cp/gather_backward.h. Backward in one launch (RingGather::bwd_one_launch, chosen in
//   plan_gather by kv_gather.h gather_bwd_one_launch where the exchange and the return are shorter than the call's
//   fixed cost it saves): nothing before the wait; one attn_bwd_block_fresh_two_kv over own keys and gathered rows
//   (the forward's key list) into this rank's dK|dV and the gathered rows'; the return as above, nothing under it.
//   That call is attn_bwd_work_list over the backward's list by default (the forward's mirrored,
//   doc_bwd_work_list_mirror; dK / dV the same bits) where attn_bwd_work_list_runs says the list op runs it (on CUDA
//   bwd v5's list mode); not with RT_ATTN_WORK_LIST=0, nor with the FP8 backward, which has no list form.
#include "parallel/cp/gather_scheme.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "kernels/attn_ready_delivery.h"
#include "kernels/attn_ready_flags.h"
#include "kernels/attn_work_list.h"
#include "kernels/ops.h"
#include "parallel/comm/fault.h"
#include "parallel/comm/watchdog.h"
#include "parallel/cp/gather_backward.h"
#include "parallel/cp/gather_forward.h"
#include "parallel/cp/gather_list_form.h"
#include "parallel/cp/gather_side_stream.h"
#include "parallel/cp/ring_attention.h"
#include "parallel/schedule/doc_work_list.h"
#include "parallel/schedule/gather_plan.h"

namespace rt {

namespace {

using Phase = RingTimer::Phase;

// Rows [first, first + count) of width W and dtype `dtype`, viewed over raw storage (a wire buffer).
Tensor rows_of(const Tensor& storage, DType dtype, int64_t first, int64_t count, int64_t W) {
  const size_t bytes = size_t(W) * dtype_size(dtype);
  RT_CHECK(size_t(first + count) * bytes <= storage.nbytes(),
           "ring gather: rows [" << first << ", " << first + count << ") of " << W << " " << dtype_name(dtype)
                                 << " elements overrun a wire buffer of " << storage.nbytes() << " bytes");
  Tensor t = storage;
  t.data = storage.data ? static_cast<char*>(storage.data) + size_t(first) * bytes : nullptr;
  t.dtype = dtype;
  t.ndim = 2;
  t.shape = {count, W, 0, 0, 0};
  return t;
}

// Host i32 values into the first values.size() elements of a (possibly device) i32 tensor.
void upload_i32(const Tensor& dst, const int32_t* values, int64_t count) {
  RT_CHECK(count <= dst.numel(), "ring gather: " << count << " index entries for a buffer of " << dst.numel());
  if (count == 0) return;
  Tensor host(const_cast<int32_t*>(values), DType::i32, Device::cpu(), {count});
  copy_cast(dst.view({dst.numel()}).slice(0, count), host);
}

}  // namespace

void RingAttention::plan_gather(const int64_t* host_pos, const int64_t* host_doc_start) {
  RingGather& g = *gather_;
  g.batch_first_epoch = g.epoch + 1;  // the batch's first flagged forward call (check_ready_fault names the layer)
  const int P = cp_.size(), r = cp_.rank();
  const int64_t B = shape_.batch, n = shape_.local_tokens, T = n * P;
  std::vector<KvGatherPlan> plans(static_cast<size_t>(B));
  std::vector<KvGatherTiles> tiles(static_cast<size_t>(B));  // [b] the calls' tiles, for the own backward's split
  const bool choose_split = g.own_split_forced < 0;
  std::vector<std::vector<int64_t>> local_row(static_cast<size_t>(B));  // [b] (T) by position: its row on its rank
  std::vector<int64_t> start(static_cast<size_t>(T)), order(static_cast<size_t>(T));  // (T) by position; ring order
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t>& row = local_row[size_t(b)];
    row.assign(size_t(T), -1);
    for (int64_t c = 0; c < T; ++c) {  // positions are a permutation (ring_hop_plan checked it)
      const int64_t p = host_pos[b * T + c];
      start[size_t(p)] = host_doc_start[b * T + c];
      row[size_t(p)] = c % n;
      order[size_t(c)] = p;
    }
    // The plan takes each rank's positions increasing (every layout gives that); any other order is sorted per rank
    // here, and the pieces find their rows through local_row.
    for (int s = 0; s < P; ++s)
      if (!std::is_sorted(order.begin() + s * n, order.begin() + (s + 1) * n))
        std::sort(order.begin() + s * n, order.begin() + (s + 1) * n);
    const std::vector<RingSpan> spans = ring_spans_from_order(order, P);
    plans[size_t(b)] = kv_gather_plan_for_spans(document_begins(start), spans, P);
    if (choose_split || g.fwd_one_launch_forced < 0 || g.bwd_one_launch_forced < 0)
      tiles[size_t(b)] = kv_gather_tiles(start, spans, plans[size_t(b)], P);
  }
  g.send_rows.assign(size_t(P), 0);
  g.recv_rows.assign(size_t(P), 0);
  g.rows = 0;
  g.total_rows = 0;
  for (const KvGatherPlan& plan : plans) {
    for (int s = 0; s < P; ++s) {
      g.send_rows[size_t(s)] += plan.rows[size_t(s * P + r)];
      g.recv_rows[size_t(s)] += plan.rows[size_t(r * P + s)];
    }
    g.rows = std::max(g.rows, plan.recv_rows[size_t(r)]);
    g.total_rows += double(plan.total_rows());
  }
  g.rows = gather_call_key_rows(g.rows, g.rows_max);  // padded for the fused call form (kv_gather.h)
  g.send_at.assign(size_t(P), 0);
  g.recv_at.assign(size_t(P), 0);
  g.sent_total = g.received_total = 0;
  for (int s = 0; s < P; ++s) {
    g.send_at[size_t(s)] = 2 * g.sent_total;
    g.recv_at[size_t(s)] = 2 * g.received_total;
    g.sent_total += g.send_rows[size_t(s)];
    g.received_total += g.recv_rows[size_t(s)];
  }
  const int64_t R = g.rows;
  RT_CHECK(R <= g.rows_max && g.sent_total <= B * g.rows_max && g.received_total <= B * g.rows_max,
           "ring gather: the plan moves more rows than the buffers hold (a bug: every plan fits (cp-1)*n per sample)");
  // Sent chunks: per peer p, K rows then V rows, each by sample, then p's pieces from this rank in order.
  std::vector<int32_t> send_index(size_t(2 * g.sent_total));  // (2 * sent_total)
  for (int p = 0; p < P; ++p)
    for (int64_t h = 0, k = 0; h < 2; ++h, k = 0)
      for (int64_t b = 0; b < B; ++b)
        for (const KvGatherPiece& piece : plans[size_t(b)].pieces[size_t(p)])
          if (piece.source == r)
            for (int64_t i = 0; i < piece.len; ++i)
              send_index[size_t(g.send_at[size_t(p)] + h * g.send_rows[size_t(p)] + k++)] =
                  int32_t(h * B * n + b * n + local_row[size_t(b)][size_t(piece.pos + i)]);
  // Received chunks in the same order, unpacked into (2, B, R) in position order; the padding is -1 (zeroed) and T.
  std::vector<int32_t> unpack_index(size_t(2 * B * R), -1);        // (2, B, R)
  std::vector<int32_t> return_index(size_t(2 * g.received_total));  // (2 * received_total)
  std::vector<int64_t> k_pos(size_t(B * R), T);                      // (B, R)
  std::vector<int64_t> cursor(static_cast<size_t>(P), 0);            // (P) rows taken from each source's chunk half
  for (int64_t b = 0; b < B; ++b)
    for (const KvGatherPiece& piece : plans[size_t(b)].pieces[size_t(r)])
      for (int64_t i = 0; i < piece.len; ++i) {
        const int s = piece.source;
        const int64_t k = cursor[size_t(s)]++, row = b * R + piece.dst_row + i;
        k_pos[size_t(row)] = piece.pos + i;
        for (int64_t h = 0; h < 2; ++h) {
          const int64_t wire_row = g.recv_at[size_t(s)] + h * g.recv_rows[size_t(s)] + k;
          unpack_index[size_t(h * B * R + row)] = int32_t(wire_row);
          return_index[size_t(wire_row)] = int32_t(h * B * R + row);
        }
      }
  // The query rows the gathered call runs on: per sample, those that see one of its gathered positions.
  g.q_rows = {};
  for (int64_t b = 0; b < B && R > 0; ++b) {
    std::vector<int64_t> gathered(k_pos.begin() + b * R, k_pos.begin() + (b + 1) * R);  // (R) increasing, padding T
    while (!gathered.empty() && gathered.back() == T) gathered.pop_back();
    std::vector<int64_t> q_pos(static_cast<size_t>(n)), q_start(static_cast<size_t>(n));  // (n) rows of sample b
    for (int64_t i = 0; i < n; ++i) {
      q_pos[size_t(i)] = host_pos[b * T + r * n + i];
      q_start[size_t(i)] = host_doc_start[b * T + r * n + i];
    }
    g.q_rows = row_range_union(g.q_rows, gathered_query_rows(q_pos.data(), q_start.data(), n, gathered));
  }
  // The forward's form (kv_gather.h gather_fwd_one_launch) and the own backward's split: from the kernel model.
  RingShape model_shape;  // per rank, as the calls run
  model_shape.heads = shape_.heads, model_shape.kv_heads = shape_.kv_heads, model_shape.head_dim = shape_.head_dim;
  model_shape.dtype_bytes = int64_t(dtype_size(g.act)), model_shape.dkv_wire_bytes = int64_t(dtype_size(g.wire));
  g.fwd_one_launch = R > 0 && (g.fwd_one_launch_forced >= 0
                                   ? g.fwd_one_launch_forced == 1
                                   : gather_fwd_one_launch_for_batch(tiles.data(), plans.data(), size_t(B), r,
                                                                     model_shape));
  // The own backward's split (from the kernel model, this rank's own key rows as they lie, the batch's exchanges),
  // and the backward's form, which the model's split prices.
  OwnBwdSplit model_split;
  if (choose_split || g.bwd_one_launch_forced < 0) {
    std::vector<int64_t> key_pairs(static_cast<size_t>(n), 0);  // (n) visible pairs per own key row, over samples
    for (int64_t b = 0; b < B; ++b)
      add_own_key_pairs(host_pos + b * T + r * n, host_doc_start + b * T + r * n, n, key_pairs);
    model_split = own_bwd_split_for_batch(tiles.data(), plans.data(), size_t(B), r, key_tile_sums(key_pairs),
                                          model_shape);
  }
  RT_CHECK(choose_split || g.own_split_forced <= n,
           "ring gather: a forced own backward split at key row " << g.own_split_forced << " of " << n);
  g.own_split = choose_split ? model_split.m : g.own_split_forced;
  g.bwd_one_launch = R > 0 && (g.bwd_one_launch_forced >= 0
                                   ? g.bwd_one_launch_forced == 1
                                   : gather_bwd_one_launch_for_batch(tiles.data(), plans.data(), size_t(B), r,
                                                                     model_split, model_shape));
  g.work_list_words = 0;
  g.work_list_tasks = 0;
  g.bwd_work_list_words = 0;
  if (g.fwd_one_launch || g.bwd_one_launch) {  // the key list: own rows' positions, T in the gap, the gathered rows'
    const int64_t S = attn_second_kv_row(n), L = S + R;
    std::vector<int64_t> list(size_t(B * L), T);  // (B, S + R)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < n; ++i) list[size_t(b * L + i)] = host_pos[b * T + r * n + i];
      std::copy(k_pos.begin() + b * R, k_pos.begin() + (b + 1) * R, list.begin() + b * L + S);
    }
    upload_i32(g.k_list_pos, reinterpret_cast<const int32_t*>(list.data()), 2 * int64_t(list.size()));
    // The work lists (on unless RT_ATTN_WORK_LIST=0): the one-launch forward's over the same key list where the list
    // op runs the call (on CUDA its kernel needs sm_90a, bf16, D 64 / 128 and 128 own and gathered rows; elsewhere
    // the launch stays attn_fwd_whole_two_kv), and the one-launch backward's (the forward's mirrored)
    // where attn_bwd_work_list_runs says the list op runs it.
    // The rule (parallel/cp/gather_list_form.h) is bench_doc_ring_steps' too; the FP8 backward is asked at the call.
    const bool fwd_list = g.fwd_one_launch &&
                          gather_fwd_list_form(g.work_list_on, gather_fwd_list_runs(g.kv.device, g.act, B, shape_.heads,
                                                                                    shape_.head_dim, n, R));
    const bool bwd_list = g.bwd_work_list.defined() && g.bwd_one_launch &&
                          gather_bwd_list_form(g.work_list_on, /*fp8_backward=*/false,
                                               gather_bwd_list_runs(g.kv.device, g.act, B, shape_.heads,
                                                                    shape_.kv_heads, shape_.head_dim, n, R));
    if (fwd_list || bwd_list) {
      DocWorkListInputs in;
      in.B = B, in.Nq = n, in.Nk = n, in.list_rows = L;
      in.k_pos = std::move(list);  // (B, S + R)
      in.q_pos.resize(size_t(B * n));
      in.q_doc_start.resize(size_t(B * n));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < n; ++i) {
          in.q_pos[size_t(b * n + i)] = host_pos[b * T + r * n + i];
          in.q_doc_start[size_t(b * n + i)] = host_doc_start[b * T + r * n + i];
        }
      // With ready flags (CUDA ranks) the forward's list in own-first order (doc_work_list_ordered): the tasks and
      // the own parts that need no gathered row first, so they run under the exchange; the same bits per task.
      const bool own_first = fwd_list && g.ready_flags_on && g.ready.defined();
      const AttnWorkList fwd = own_first ? doc_work_list_ordered(in, DocWorkListOrder::own_first) : doc_work_list(in);
      if (fwd_list) {
        const std::vector<int32_t> words = attn_work_list_words(fwd);
        RT_CHECK(int64_t(words.size()) <= g.work_list.numel(),
                 "ring gather: the work list's " << words.size() << " words overrun its buffer of "
                                                 << g.work_list.numel() << " (a bug in make_ring_gather's bound)");
        upload_i32(g.work_list, words.data(), int64_t(words.size()));
        g.work_list_words = int64_t(words.size());
        g.work_list_tasks = int64_t(fwd.tasks.size());
        g.work_list_slots = int64_t(fwd.merge_slots);
        RT_CHECK(g.work_list_slots == 0 || (g.split_state.defined() && g.work_list_slots <= g.split_state.shape[0]),
                 "ring gather: the forward list's " << g.work_list_slots << " merge slots exceed its scratch of "
                                                    << (g.split_state.defined() ? g.split_state.shape[0] : 0)
                                                    << " (a bug in make_ring_gather's bound)");
      }
      if (bwd_list) {
        const std::vector<int32_t> words =
            attn_work_list_words(doc_bwd_work_list_mirror(own_first ? doc_work_list(in) : fwd, in));
        RT_CHECK(int64_t(words.size()) <= g.bwd_work_list.numel(),
                 "ring gather: the backward work list's " << words.size() << " words overrun its buffer of "
                                                          << g.bwd_work_list.numel()
                                                          << " (a bug in make_ring_gather's bound)");
        upload_i32(g.bwd_work_list, words.data(), int64_t(words.size()));
        g.bwd_work_list_words = int64_t(words.size());
      }
    }
  }
  upload_i32(g.send_index, send_index.data(), int64_t(send_index.size()));
  upload_i32(g.unpack_index, unpack_index.data(), int64_t(unpack_index.size()));
  upload_i32(g.return_index, return_index.data(), int64_t(return_index.size()));
  upload_i32(g.k_pos, reinterpret_cast<const int32_t*>(k_pos.data()), 2 * int64_t(k_pos.size()));
}

void RingAttention::set_gather_own_split(int64_t m) {
  RT_CHECK(gather_, "ring attention: set_gather_own_split needs the gather scheme's buffers (construct with "
                    "gather = true)");
  RT_CHECK(m >= -1 && m <= shape_.local_tokens, "ring attention: own backward split at key row " << m << " of "
                                                                                             << shape_.local_tokens);
  gather_->own_split_forced = m;
}

void RingAttention::set_gather_fwd_one_launch(int mode) {
  RT_CHECK(gather_, "ring attention: set_gather_fwd_one_launch needs the gather scheme's buffers (construct with "
                    "gather = true)");
  RT_CHECK(mode >= -1 && mode <= 1, "ring attention: set_gather_fwd_one_launch(" << mode << "): -1 (choose), 0 or 1");
  gather_->fwd_one_launch_forced = mode;
}

bool RingAttention::gather_fwd_one_launch() const {
  return scheme_ == CpScheme::gather && gather_->fwd_one_launch;
}

void RingAttention::set_gather_bwd_one_launch(int mode) {
  RT_CHECK(gather_, "ring attention: set_gather_bwd_one_launch needs the gather scheme's buffers (construct with "
                    "gather = true)");
  RT_CHECK(mode >= -1 && mode <= 1, "ring attention: set_gather_bwd_one_launch(" << mode << "): -1 (choose), 0 or 1");
  gather_->bwd_one_launch_forced = mode;
}

bool RingAttention::gather_fwd_work_list() const {
  return gather_fwd_one_launch() && gather_->work_list_words > 0;
}

bool RingAttention::gather_bwd_one_launch() const {
  return scheme_ == CpScheme::gather && gather_->bwd_one_launch;
}

bool RingAttention::gather_bwd_work_list() const {
  return gather_bwd_one_launch() &&
         gather_bwd_list_form(gather_->work_list_on, bwd_ops_.fp8, gather_->bwd_work_list_words > 0);
}

int64_t RingAttention::gather_own_split() const {
  return scheme_ == CpScheme::gather ? gather_->own_split : 0;
}

AttnMask RingAttention::own_mask() const {
  const int64_t n = shape_.local_tokens, T = n * cp_.size();
  AttnMask m;
  m.docs.q_pos = doc_pos_ + cp_.rank() * n;
  m.docs.q_doc_start = doc_start_ + cp_.rank() * n;
  m.docs.k_pos = m.docs.q_pos;
  m.docs.q_stride = m.docs.k_stride = T;
  return m;
}

AttnMask RingAttention::key_list_mask() const {
  AttnMask m = own_mask();
  m.docs.k_pos = static_cast<const int64_t*>(gather_->k_list_pos.data);
  m.docs.k_stride = attn_second_kv_row(shape_.local_tokens) + gather_->rows;
  return m;
}

AttnMask RingAttention::gathered_mask() const {
  AttnMask m = own_mask();
  m.docs.k_pos = static_cast<const int64_t*>(gather_->k_pos.data);
  m.docs.k_stride = gather_->rows;
  return m;
}

namespace {

// K (h = 0) or V (h = 1) of a (2, B, R, Hkv, D) view (the gathered rows or their dK|dV): (B, R, Hkv, D).
Tensor gathered_half(const Tensor& kv, int64_t h, int64_t B, int64_t R, int64_t Hkv, int64_t D) {
  return kv.slice(h * B * R * Hkv * D, (h + 1) * B * R * Hkv * D).view({B, R, Hkv, D});
}

// The transfers of one exchange: per peer with rows, rows [at, at + 2 * rows) of a wire buffer.
std::vector<PeerTransfer> chunk_transfers(const Tensor& wire, DType dtype, int64_t W, const std::vector<int64_t>& at,
                                          const std::vector<int64_t>& rows, int self) {
  std::vector<PeerTransfer> out;
  for (int p = 0; p < int(rows.size()); ++p)
    if (p != self && rows[size_t(p)] > 0)
      out.push_back({rows_of(wire, dtype, at[size_t(p)], 2 * rows[size_t(p)], W), p});
  return out;
}

}  // namespace

ExchangeHandle RingAttention::gather_kv_exchange_start(const Tensor& k, const Tensor& v) {
  RingGather& g = *gather_;
  const int r = cp_.rank();
  const int64_t B = shape_.batch, n = shape_.local_tokens, W = shape_.kv_heads * shape_.head_dim;
  {
    RingTimerScope t(*timer_, Phase::compute);
    copy_cast(half(kv_buf_[0], 0), k);  // (2, B, n, Hkv, D): the rows the chunks are gathered from
    copy_cast(half(kv_buf_[0], 1), v);
    gather_rows(rows_of(g.wire_send, g.act, 0, 2 * g.sent_total, W), kv_buf_[0].view({2 * B * n, W}),
                g.send_index.slice(0, 2 * g.sent_total));
  }
  RingTimerScope t(*timer_, Phase::comm);
  call_sent_bytes_ += double(g.sent_total) * 2.0 * double(W * int64_t(dtype_size(g.act)));
  return cp_.peer_exchange_start(chunk_transfers(g.wire_send, g.act, W, g.send_at, g.send_rows, r),
                                 chunk_transfers(g.wire_recv, g.act, W, g.recv_at, g.recv_rows, r));
}

Tensor RingAttention::gathered_kv() {
  RingGather& g = *gather_;
  const int64_t B = shape_.batch, R = g.rows, W = shape_.kv_heads * shape_.head_dim;
  const Tensor kv = g.kv.view({g.kv.numel()}).slice(0, 2 * B * R * W);  // (2, B, R, Hkv, D)
  gather_rows(kv.view({2 * B * R, W}), rows_of(g.wire_recv, g.act, 0, 2 * g.received_total, W),
              g.unpack_index.slice(0, 2 * B * R));
  return kv;
}

void RingAttention::gather_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse) {
  RingGather& g = *gather_;
  const int r = cp_.rank();
  const int64_t B = shape_.batch, R = g.rows, Hkv = shape_.kv_heads, D = shape_.head_dim;
  const bool own_runs = hops_.visible[size_t(r * cp_.size() + r)] != 0;
  if (g.fwd_one_launch && own_runs && g.work_list_words > 0 && g.ready_flags_on && g.ready.defined() &&
      q.device.is_cuda()) {
    gather_forward_flagged(q, k, v, out, lse);
    return;
  }
  const ExchangeHandle x = gather_kv_exchange_start(k, v);
  call_ring_bytes_ += double(cp_.size() - 1) * double(kv_buf_[0].nbytes());
  maybe_inject_fault("ring_attention.forward_step");  // with the exchange in flight
  if (g.fwd_one_launch && own_runs) {  // one launch over own and gathered keys once they are here
    {
      RingTimerScope t(*timer_, Phase::comm);
      cp_.wait(x);
    }
    RingTimerScope t(*timer_, Phase::compute);
    const Tensor kv = gathered_kv();  // (2, B, R, Hkv, D)
    if (g.work_list_words > 0)  // the default (RT_ATTN_WORK_LIST unset or 1): the same call over the plan's list
      attn_fwd_work_list(q, k, v, gathered_half(kv, 0, B, R, Hkv, D), gathered_half(kv, 1, B, R, Hkv, D), state_,
                         key_list_mask(), g.work_list.slice(0, g.work_list_words), g.work_list_tasks, out, lse);
    else
      attn_fwd_whole_two_kv(q, k, v, gathered_half(kv, 0, B, R, Hkv, D), gathered_half(kv, 1, B, R, Hkv, D), state_,
                            key_list_mask(), out, lse);
    return;
  }
  // parallel/cp/gather_forward.h: the merge form for a light gathered call, the state form for a heavy one.
  const bool merge_form = gather_merge_form(R, shape_.local_tokens);
  {
    RingTimerScope t(*timer_, Phase::compute);
    if (own_runs) {
      if (merge_form) attn_fwd_whole(q, k, v, state_, own_mask(), out, lse);  // out / lse of every row
      else attn_fwd_block_first(q, k, v, state_, own_mask());                 // every row's fp32 state
    } else {  // no own key visible: out = 0, lse = -inf (merge form), or the reset state (state form)
      ++skipped_steps_;
      attn_state_reset(state_);
      if (merge_form) attn_fwd_finalize(state_, out, lse);
    }
    if (R == 0) ++skipped_steps_;
  }
  {
    RingTimerScope t(*timer_, Phase::comm);
    cp_.wait(x);
  }
  if (R == 0 || g.q_rows.empty()) return;
  RingTimerScope t(*timer_, Phase::compute);
  const Tensor kv = gathered_kv();  // (2, B, R, Hkv, D)
  const Tensor gk = gathered_half(kv, 0, B, R, Hkv, D), gv = gathered_half(kv, 1, B, R, Hkv, D);
  if (merge_form) gathered_fwd_merge(q, gk, gv, gathered_mask(), g.q_rows, g.out2, g.lse2, state_, out, lse);
  else attn_fwd_block_last(q, gk, gv, state_, gathered_mask(), out, lse);
}

// The one-launch work-list forward with ready flags (CUDA ranks; kernels/attn_ready_flags.h, gather_side_stream.h):
//   compute stream: the flags zeroed once | the list kernel (persistent form: AttnReadyFlags::free_sms SMs left
//                   free), launched before the exchange's wait: its own-first units run under the exchange, its
//                   gathered units wait for ready[0] == epoch | waits for the side stream
//   side stream:    waits for the compute stream (k, v written) | pack and post the exchange (NcclComm's comm stream
//                   follows this stream; MpiComm stages through it) | wait (NCCL: this stream waits; MPI: the host,
//                   then the copy in) | unpack (gather_rows) | attn_ready_release (the epoch, st.release.gpu)
// The compute stream waits for the pack before the list kernel (the exchange starts first, as without flags) and for
// the whole side stream after it, so the next work on the compute stream sees the gathered buffer free. A wait that
// times out (parallel.timeout_s) leaves NaN rows and the fault word; check_ready_fault raises it. Timings: the list
// kernel's time, its waits inside, counts as compute (no exposed comm is recorded on the compute stream).
void RingAttention::gather_forward_flagged(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out,
                                           Tensor lse) {
  RingGather& g = *gather_;
  const int64_t B = shape_.batch, R = g.rows, Hkv = shape_.kv_heads, D = shape_.head_dim, W = Hkv * D;
  if (!g.side) {
    g.side = make_gather_side_stream(q.device);
    // The unpack's and the flag's kernels loaded now: under lazy loading their first launch, on the side stream while
    // the list kernel waits for the flag, could wait for that kernel to end (kernels/attn_ready_delivery.h).
    attn_ready_load_delivery_kernels(q.device);
  }
  GatherSideStream& side = *g.side;
  if (!g.ready_zeroed) {  // once: no word left in the arena passes for an epoch (ordered on the compute stream)
    const int32_t zeros[2] = {0, 0};
    upload_i32(g.ready, zeros, 1);
    upload_i32(g.fault, zeros, 2);
    upload_i32(g.split_count, std::vector<int32_t>(size_t(g.split_count.numel()), 0).data(), g.split_count.numel());
    g.ready_zeroed = true;
  }
  AttnReadyFlags flags;
  flags.ready = g.ready;  // (1) i32
  flags.fault = g.fault;  // (2) i32
  flags.epoch = ++g.epoch;
  flags.timeout_s = g.ready_timeout_s = watchdog_timeout_s();
  side.follow_compute();
  ExchangeHandle x;
  {
    GatherSideScope on_side(side);
    x = gather_kv_exchange_start(k, v);
  }
  call_ring_bytes_ += double(cp_.size() - 1) * double(kv_buf_[0].nbytes());
  maybe_inject_fault("ring_attention.forward_step");  // with the exchange in flight
  side.lead_compute();  // the pack before the list kernel: the exchange starts first
  const Tensor kv = g.kv.view({g.kv.numel()}).slice(0, 2 * B * R * W);  // (2, B, R, Hkv, D): unpacked on the side
  {
    RingTimerScope t(*timer_, Phase::compute);
    attn_fwd_work_list(q, k, v, gathered_half(kv, 0, B, R, Hkv, D), gathered_half(kv, 1, B, R, Hkv, D), state_,
                       key_list_mask(), g.work_list.slice(0, g.work_list_words), g.work_list_tasks, out, lse,
                       AttnSplitScratch{g.split_state, g.split_count, g.work_list_slots}, flags);
  }
  {
    GatherSideScope on_side(side);
    cp_.wait(x);
    gathered_kv();                   // gather_rows into kv
    attn_ready_release(flags, 0);    // ready[0] = epoch, after the rows
  }
  side.lead_compute();
  ++g.ready_flag_calls;
}

void RingAttention::check_ready_fault(const std::string& where) {
  if (!gather_ || !gather_->ready_zeroed) return;  // no flagged call yet: nothing to read, no wait
  RingGather& g = *gather_;
  int32_t host[2] = {0, 0};  // (2) the fault word's halves
  copy_cast(Tensor(host, DType::i32, Device::cpu(), {2}), g.fault);  // waits for the compute stream's work so far
  uint64_t word = uint64_t(uint32_t(host[0])) | (uint64_t(uint32_t(host[1])) << 32);
  const AttnReadyFault fault = attn_ready_fault_decode(word);
  if (!fault.set) return;
  const int32_t zeros[2] = {0, 0};
  upload_i32(g.fault, zeros, 2);
  std::ostringstream at;
  at << where << ": cp rank " << cp_.rank() << " of " << cp_.size() << ", ";
  if (fault.epoch >= g.batch_first_epoch)
    at << "forward call " << fault.epoch - g.batch_first_epoch << " of the batch (layer "
       << fault.epoch - g.batch_first_epoch << " unless layers recompute)";
  else
    at << "a forward call of an earlier batch";
  RT_CHECK(false, attn_ready_fault_message(fault, g.ready_timeout_s, at.str()));
}

int64_t RingAttention::gather_ready_flag_calls() const { return gather_ ? gather_->ready_flag_calls : 0; }

void RingAttention::gather_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& dout, const Tensor& lse, Tensor dq, Tensor dk, Tensor dv) {
  RingGather& g = *gather_;
  const int r = cp_.rank();
  const int64_t B = shape_.batch, n = shape_.local_tokens, Hkv = shape_.kv_heads, D = shape_.head_dim, W = Hkv * D,
                R = g.rows;
  const double dkv_row = 2.0 * double(W * int64_t(dtype_size(g.wire)));  // dK and dV of one row on the wire
  Tensor own = grad_buf_[0];  // (2, B, n, Hkv, D) f32: this rank's dK|dV, the returned rows added in
  {
    RingTimerScope t(*timer_, Phase::compute);
    fill(dq_acc_, 0.f);
    attn_bwd_delta(out, dout, delta_);  // once per layer
  }
  ExchangeHandle x = gather_kv_exchange_start(k, v);
  {
    const double dkv_block = grad_wire_[0].defined() ? double(grad_wire_[0].nbytes()) : double(grad_buf_[0].nbytes());
    call_ring_bytes_ += double(cp_.size() - 1) * (double(kv_buf_[0].nbytes()) + dkv_block);
  }
  // The own call in two parts (parallel/cp/gather_backward.h): A = own keys [0, m) now, under the K/V exchange; B =
  // keys [m, n) after the dK/dV return is posted, under it. m = 0 (or n): A is the whole call and B nothing. In one
  // launch (g.bwd_one_launch) the own call runs whole with the gathered call once the exchange is done.
  const bool own_runs = hops_.visible[size_t(r * cp_.size() + r)] != 0;
  const bool one_launch = g.bwd_one_launch && own_runs && R > 0;
  const int64_t m = own_runs && !one_launch ? g.own_split : 0;
  {
    RingTimerScope t(*timer_, Phase::compute);
    if (one_launch) {
      // nothing before the exchange: the launch below writes every own row's dK / dV
    } else if (own_runs) {
      own_bwd_part(OwnBwdPart::a, m, q, k, v, dout, lse, delta_, dq_acc_, half(own, 0), half(own, 1), own_mask(),
                   bwd_ops_);
    } else {
      ++skipped_steps_;
      fill(own, 0.f);
    }
  }
  {
    RingTimerScope t(*timer_, Phase::comm);
    cp_.wait(x);
  }
  {
    RingTimerScope t(*timer_, Phase::compute);
    if (R == 0) {
      ++skipped_steps_;
    } else {
      const Tensor kv = gathered_kv();                                        // (2, B, R, Hkv, D)
      const Tensor dkv = g.dkv.view({g.dkv.numel()}).slice(0, 2 * B * R * W);  // (2, B, R, Hkv, D) f32
      auto part = [&](const Tensor& t, int64_t h) { return gathered_half(t, h, B, R, Hkv, D); };
      // The list (the default) unless RT_ATTN_WORK_LIST=0, the FP8 backward, or where the list op cannot run it.
      if (one_launch && gather_bwd_work_list())
        attn_bwd_work_list(q, k, v, part(kv, 0), part(kv, 1), dout, lse, delta_, dq_acc_, half(own, 0), half(own, 1),
                           part(dkv, 0), part(dkv, 1), key_list_mask(),
                           g.bwd_work_list.slice(0, g.bwd_work_list_words));
      else if (one_launch)
        bwd_ops_.fresh_two_kv(q, k, v, part(kv, 0), part(kv, 1), dout, lse, delta_, dq_acc_, half(own, 0),
                              half(own, 1), part(dkv, 0), part(dkv, 1), key_list_mask());
      else
        bwd_ops_.fresh(q, part(kv, 0), part(kv, 1), dout, lse, delta_, dq_acc_, part(dkv, 0), part(dkv, 1),
                       gathered_mask());
      gather_rows(rows_of(g.wire_send, g.wire, 0, 2 * g.received_total, W), dkv.view({2 * B * R, W}),
                  g.return_index.slice(0, 2 * g.received_total));  // the owners' chunks, in dkv_wire
    }
  }
  {
    RingTimerScope t(*timer_, Phase::comm);
    x = cp_.peer_exchange_start(chunk_transfers(g.wire_send, g.wire, W, g.recv_at, g.recv_rows, r),
                                chunk_transfers(g.wire_recv, g.wire, W, g.send_at, g.send_rows, r));
    call_sent_bytes_ += double(g.received_total) * dkv_row;
  }
  if (m > 0 && m < n) {
    RingTimerScope t(*timer_, Phase::compute);
    own_bwd_part(OwnBwdPart::b, m, q, k, v, dout, lse, delta_, dq_acc_, half(own, 0), half(own, 1), own_mask(),
                 bwd_ops_);
  }
  {
    RingTimerScope t(*timer_, Phase::comm);
    cp_.wait(x);
  }
  RingTimerScope t(*timer_, Phase::compute);
  const Tensor own_rows = own.view({2 * B * n, W});  // (2*B*n, W) f32
  for (int p = 0; p < cp_.size(); ++p)  // in peer order: each chunk names an own row at most once
    if (p != r && g.send_rows[size_t(p)] > 0)
      scatter_add_rows(own_rows, rows_of(g.wire_recv, g.wire, g.send_at[size_t(p)], 2 * g.send_rows[size_t(p)], W),
                       g.send_index.slice(g.send_at[size_t(p)], g.send_at[size_t(p)] + 2 * g.send_rows[size_t(p)]));
  copy_cast(dq, dq_acc_);
  copy_cast(dk, half(own, 0));
  copy_cast(dv, half(own, 1));
}

}  // namespace rt
