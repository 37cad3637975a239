// The all-to-all head exchange around ring attention (parallel/context_attention.h).
//
// Wire layout of one exchange: (u, B, n, W) elements, chunk p for (or from) all-to-all rank p; a token row of a chunk
// holds W elements, the tensors it carries side by side (e.g. [Q heads of p | its K heads | its V heads]). A rank's
// own chunk is copied by the communicator. Head-sharded tensors are (B, u*n, heads, D): the tokens of rank p of the
// group at rows [p*n, (p+1)*n) of each sample, i.e. the ring shard of the cp/u ring in cp-rank order, which is the
// order of the loader's ring order and of the document arrays.
//
// Only copy_rows, copy_cast, fill and the Comm touch memory, so the same code runs on CPU and CUDA tensors. The
// forward sends Q, K and V in one exchange (one latency, one message per peer) and O back in a second; the backward
// sends Q, K, V, O and dO in one and dQ, dK, dV back in one.
#include "parallel/context_attention.h"

#include <numeric>

#include "kernels/ops.h"

namespace rt {

namespace {
using Phase = RingTimer::Phase;
}  // namespace

HeadExchangeShape head_exchange_shape(const RingAttentionShape& shape, int u) {
  const int64_t H = shape.heads, Hkv = shape.kv_heads, B = shape.batch, n = shape.local_tokens, D = shape.head_dim;
  RT_CHECK(u >= 1 && H % u == 0,
           "parallel.cp_a2a=" << u << " does not divide the " << H
                              << " query heads of a tensor-parallel rank; tp x cp_a2a must divide model.n_head");
  RT_CHECK(Hkv >= 1 && H % Hkv == 0, "context attention: " << H << " query heads are not a multiple of " << Hkv
                                                           << " KV heads");
  HeadExchangeShape x;
  x.u = u;
  x.q_heads = H / u;
  const int64_t g = H / Hkv;
  x.kv_group = std::gcd(x.q_heads, g);
  x.kv_heads = x.q_heads / x.kv_group;
  x.replicated = u * x.kv_heads > Hkv;
  if (u == 1) return x;
  const double act = double(dtype_size(shape.dtype)), grad = x.replicated ? 4.0 : act;
  const double rows = double(u - 1) * double(B * n * D);  // rows leaving this rank, times D
  const double hq = double(x.q_heads), hk = double(x.kv_heads);
  x.forward_bytes = rows * ((hq + 2 * hk) * act + hq * act);
  x.backward_bytes = rows * ((3 * hq + 2 * hk) * act + (hq + 2 * hk) * grad);
  const double nh_d = double(B * u * n * D);  // one head-sharded head of the group's tokens
  x.buffer_bytes = nh_d * ((3 * hq + 2 * hk) * act + (hq + 2 * hk) * grad) +
                   2.0 * double(u * B * n * D) * std::max((3 * hq + 2 * hk) * act, (hq + 2 * hk) * grad) +
                   (x.replicated ? 2.0 * double(B * n * Hkv * D) * 4.0 : 0.0);
  x.replica_bytes = x.replicated ? nh_d * 2 * (hk - double(Hkv) / u) * act : 0.0;
  return x;
}

ContextAttention::ContextAttention(Comm& ring, Comm& a2a, Layout layout, bool causal, const RingAttentionShape& shape,
                                   Arena& arena, DType dkv_wire)
    : a2a_(a2a), shape_(shape) {
  const int u = a2a.size();
  x_ = head_exchange_shape(shape, u);
  RingAttentionShape ring_shape = shape;
  if (u > 1) {
    ring_shape.local_tokens = shape.local_tokens * u;
    ring_shape.heads = x_.q_heads;
    ring_shape.kv_heads = x_.kv_heads;
  }
  ring_ = std::make_unique<RingAttention>(ring, layout, causal, ring_shape, arena, dkv_wire);
  timer_ = make_ring_timer(arena.device());
  if (u == 1) return;
  const int64_t B = shape.batch, n = shape.local_tokens, nh = u * n, D = shape.head_dim, hq = x_.q_heads,
                hk = x_.kv_heads;
  const DType act = shape.dtype;
  grad_dtype_ = x_.replicated ? DType::f32 : act;
  q_h_ = arena.alloc(act, {B, nh, hq, D}, "a2a.q_heads");         // (B, u*n, hq, D)
  out_h_ = arena.alloc(act, {B, nh, hq, D}, "a2a.out_heads");     // (B, u*n, hq, D)
  dout_h_ = arena.alloc(act, {B, nh, hq, D}, "a2a.dout_heads");   // (B, u*n, hq, D)
  k_h_ = arena.alloc(act, {B, nh, hk, D}, "a2a.k_heads");         // (B, u*n, hk, D)
  v_h_ = arena.alloc(act, {B, nh, hk, D}, "a2a.v_heads");         // (B, u*n, hk, D)
  dq_h_ = arena.alloc(grad_dtype_, {B, nh, hq, D}, "a2a.dq_heads");  // (B, u*n, hq, D)
  dk_h_ = arena.alloc(grad_dtype_, {B, nh, hk, D}, "a2a.dk_heads");  // (B, u*n, hk, D)
  dv_h_ = arena.alloc(grad_dtype_, {B, nh, hk, D}, "a2a.dv_heads");  // (B, u*n, hk, D)
  if (x_.replicated)
    dkv_sum_ = arena.alloc(DType::f32, {2, B, n, shape.kv_heads, D}, "a2a.dkv_replica_sum");  // (2, B, n, Hkv, D)
  // The widest use in bytes: the backward's outgoing [Q|K|V|O|dO] in act, or the gradients in grad_dtype_.
  const int64_t out_bytes = (3 * hq + 2 * hk) * D * int64_t(dtype_size(act));
  const int64_t grad_bytes = (hq + 2 * hk) * D * int64_t(dtype_size(grad_dtype_));
  const int64_t row_words = (std::max(out_bytes, grad_bytes) + 3) / 4;
  send_ = arena.alloc(DType::f32, {u, B, n, row_words}, "a2a.send");  // (u, B, n, W) storage
  recv_ = arena.alloc(DType::f32, {u, B, n, row_words}, "a2a.recv");  // (u, B, n, W) storage
}

Tensor ContextAttention::wire(const Tensor& storage, DType dtype, int64_t width) const {
  const int64_t count = int64_t(x_.u) * shape_.batch * shape_.local_tokens * width;  // (u, B, n, width)
  RT_CHECK(size_t(count) * dtype_size(dtype) <= storage.nbytes(), "a2a: exchange buffer too small");
  return Tensor(storage.data, dtype, storage.device, {count});
}

void ContextAttention::seq_to_wire(const Tensor& seq, int64_t heads, int64_t head0, int64_t count, Tensor& w,
                                   int64_t W, int peer, int64_t col) {
  const int64_t B = shape_.batch, n = shape_.local_tokens, D = shape_.head_dim;
  StridedRows g;
  g.rows = B * n, g.width = count * D;
  g.src_offset = head0 * D, g.src_row_stride = heads * D;
  g.dst_offset = peer * B * n * W + col, g.dst_row_stride = W;
  copy_rows(w, seq, g, false);
}

void ContextAttention::wire_to_seq(const Tensor& w, int64_t W, int peer, int64_t col, Tensor& seq, int64_t heads,
                                   int64_t head0, int64_t count, bool accumulate) {
  const int64_t B = shape_.batch, n = shape_.local_tokens, D = shape_.head_dim;
  StridedRows g;
  g.rows = B * n, g.width = count * D;
  g.src_offset = peer * B * n * W + col, g.src_row_stride = W;
  g.dst_offset = head0 * D, g.dst_row_stride = heads * D;
  copy_rows(seq, w, g, accumulate);
}

void ContextAttention::heads_to_wire(const Tensor& h, int64_t heads, Tensor& w, int64_t W, int peer, int64_t col) {
  const int64_t B = shape_.batch, n = shape_.local_tokens, D = shape_.head_dim, nh = x_.u * n;
  StridedRows g;
  g.blocks = B, g.rows = n, g.width = heads * D;
  g.src_offset = peer * n * heads * D, g.src_block_stride = nh * heads * D, g.src_row_stride = heads * D;
  g.dst_offset = peer * B * n * W + col, g.dst_block_stride = n * W, g.dst_row_stride = W;
  copy_rows(w, h, g, false);
}

void ContextAttention::wire_to_heads(const Tensor& w, int64_t W, int peer, int64_t col, Tensor& h, int64_t heads) {
  const int64_t B = shape_.batch, n = shape_.local_tokens, D = shape_.head_dim, nh = x_.u * n;
  StridedRows g;
  g.blocks = B, g.rows = n, g.width = heads * D;
  g.src_offset = peer * B * n * W + col, g.src_block_stride = n * W, g.src_row_stride = W;
  g.dst_offset = peer * n * heads * D, g.dst_block_stride = nh * heads * D, g.dst_row_stride = heads * D;
  copy_rows(h, w, g, false);
}

void ContextAttention::kv_to_wire(const Tensor& seq, Tensor& w, int64_t W, int64_t col) {
  const int64_t hq = x_.q_heads, hk = x_.kv_heads, s = x_.kv_group, g = shape_.heads / shape_.kv_heads;
  for (int peer = 0; peer < x_.u; ++peer)
    for (int64_t j = 0; j < hk;) {  // runs of consecutive source heads: one copy each
      const int64_t first = (peer * hq + j * s) / g;
      int64_t len = 1;
      while (j + len < hk && (peer * hq + (j + len) * s) / g == first + len) ++len;
      seq_to_wire(seq, shape_.kv_heads, first, len, w, W, peer, col + j * shape_.head_dim);
      j += len;
    }
}

void ContextAttention::exchange(const Tensor& send, Tensor recv) {
  RingTimerScope t(*timer_, Phase::comm);
  a2a_.wait(a2a_.all_to_all_start(send, recv));
}

void ContextAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse) {
  if (x_.u == 1) return ring_->forward(q, k, v, out, lse);
  const int64_t B = shape_.batch, n = shape_.local_tokens, H = shape_.heads, D = shape_.head_dim, hq = x_.q_heads,
                hk = x_.kv_heads, u = x_.u;
  check_shape(q, {B, n, H, D}, "context_attention.forward", "q");
  check_shape(out, {B, n, H, D}, "context_attention.forward", "out");
  RT_CHECK(lse.numel() == B * H * n, "context_attention.forward: lse " << lse.shape_str() << " must hold B*H*n");
  const DType act = shape_.dtype;
  // Q, K, V out: a token row of chunk p = [Q heads of p | its K heads | its V heads].
  const int64_t W = (hq + 2 * hk) * D;
  Tensor send = wire(send_, act, W), recv = wire(recv_, act, W);
  {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) seq_to_wire(q, H, p * hq, hq, send, W, p, 0);
    kv_to_wire(k, send, W, hq * D);
    kv_to_wire(v, send, W, (hq + hk) * D);
  }
  exchange(send, recv);
  {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) {
      wire_to_heads(recv, W, p, 0, q_h_, hq);
      wire_to_heads(recv, W, p, hq * D, k_h_, hk);
      wire_to_heads(recv, W, p, (hq + hk) * D, v_h_, hk);
    }
  }
  end_exchange();
  ring_->forward(q_h_, k_h_, v_h_, out_h_, lse.view({B, hq, u * n}));
  // O back: chunk p = this rank's heads of p's tokens.
  const int64_t Wo = hq * D;
  Tensor osend = wire(send_, act, Wo), orecv = wire(recv_, act, Wo);
  {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) heads_to_wire(out_h_, hq, osend, Wo, p, 0);
  }
  exchange(osend, orecv);
  {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) wire_to_seq(orecv, Wo, p, 0, out, H, p * hq, hq, false);
  }
  end_exchange();
}

void ContextAttention::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& dout, const Tensor& lse, Tensor dq, Tensor dk, Tensor dv) {
  if (x_.u == 1) return ring_->backward(q, k, v, out, dout, lse, dq, dk, dv);
  const int64_t B = shape_.batch, n = shape_.local_tokens, H = shape_.heads, Hkv = shape_.kv_heads,
                D = shape_.head_dim, hq = x_.q_heads, hk = x_.kv_heads, u = x_.u;
  const char* op = "context_attention.backward";
  check_shape(dq, {B, n, H, D}, op, "dq");
  check_shape(dk, {B, n, Hkv, D}, op, "dk");
  check_shape(dv, {B, n, Hkv, D}, op, "dv");
  const DType act = shape_.dtype;
  // Out: chunk p = [Q | K | V | O | dO] heads of p.
  const int64_t W = (3 * hq + 2 * hk) * D;
  Tensor send = wire(send_, act, W), recv = wire(recv_, act, W);
  {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) {
      seq_to_wire(q, H, p * hq, hq, send, W, p, 0);
      seq_to_wire(out, H, p * hq, hq, send, W, p, (hq + 2 * hk) * D);
      seq_to_wire(dout, H, p * hq, hq, send, W, p, (2 * hq + 2 * hk) * D);
    }
    kv_to_wire(k, send, W, hq * D);
    kv_to_wire(v, send, W, (hq + hk) * D);
  }
  exchange(send, recv);
  {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) {
      wire_to_heads(recv, W, p, 0, q_h_, hq);
      wire_to_heads(recv, W, p, hq * D, k_h_, hk);
      wire_to_heads(recv, W, p, (hq + hk) * D, v_h_, hk);
      wire_to_heads(recv, W, p, (hq + 2 * hk) * D, out_h_, hq);
      wire_to_heads(recv, W, p, (2 * hq + 2 * hk) * D, dout_h_, hq);
    }
  }
  end_exchange();
  ring_->backward(q_h_, k_h_, v_h_, out_h_, dout_h_, lse.view({B, hq, u * n}), dq_h_, dk_h_, dv_h_);
  // Back: chunk p = [dQ | dK | dV] of p's tokens, in grad_dtype_ (f32 when K/V heads were replicated).
  const int64_t Wg = (hq + 2 * hk) * D;
  Tensor gsend = wire(send_, grad_dtype_, Wg), grecv = wire(recv_, grad_dtype_, Wg);
  {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) {
      heads_to_wire(dq_h_, hq, gsend, Wg, p, 0);
      heads_to_wire(dk_h_, hk, gsend, Wg, p, hq * D);
      heads_to_wire(dv_h_, hk, gsend, Wg, p, (hq + hk) * D);
    }
  }
  exchange(gsend, grecv);
  {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) wire_to_seq(grecv, Wg, p, 0, dq, H, p * hq, hq, false);
    // dK, dV: each KV head from every rank that held it, summed in f32 when there were several (replicated), then
    // rounded once into dk / dv; otherwise each head arrives exactly once and is copied.
    const int64_t s = x_.kv_group, g = H / Hkv;
    Tensor dk_sum = x_.replicated ? dkv_sum_.slice(0, 1).view({B, n, Hkv, D}) : dk;
    Tensor dv_sum = x_.replicated ? dkv_sum_.slice(1, 2).view({B, n, Hkv, D}) : dv;
    if (x_.replicated) fill(dkv_sum_, 0.f);
    for (int p = 0; p < u; ++p)
      for (int64_t j = 0; j < hk; ++j) {
        const int64_t head = (p * hq + j * s) / g;
        wire_to_seq(grecv, Wg, p, (hq + j) * D, dk_sum, Hkv, head, 1, x_.replicated);
        wire_to_seq(grecv, Wg, p, (hq + hk + j) * D, dv_sum, Hkv, head, 1, x_.replicated);
      }
    if (x_.replicated) {
      copy_cast(dk, dk_sum);
      copy_cast(dv, dv_sum);
    }
  }
  end_exchange();
}

void ContextAttention::end_exchange() {
  timer_->end_call();
  if (timer_->pending() > kRingTimerMaxPending) collect();  // bounds the timer's event pool
}

void ContextAttention::collect() const {
  collected_.clear();
  timer_->collect(collected_);
  for (const RingTimings& t : collected_) {
    RingTimings x;
    x.compute_s = t.compute_s;
    x.exposed_a2a_s = t.exposed_comm_s;
    a2a_sum_.accumulate(x);
  }
  // The latest call's two exchanges (before and after the ring) belong to it.
  if (collected_.size() >= 2) {
    a2a_last_.reset();
    for (size_t i = collected_.size() - 2; i < collected_.size(); ++i) {
      a2a_last_.compute_s += collected_[i].compute_s;
      a2a_last_.exposed_a2a_s += collected_[i].exposed_comm_s;
    }
  }
}

const RingTimings& ContextAttention::timings() const {
  collect();
  combined_ = ring_->timings();
  combined_.accumulate(a2a_sum_);
  return combined_;
}

const RingTimings& ContextAttention::last_call_timings() const {
  collect();
  combined_last_ = ring_->last_call_timings();
  combined_last_.accumulate(a2a_last_);
  return combined_last_;
}

void ContextAttention::reset_timings() {
  ring_->reset_timings();
  timer_->discard();
  a2a_sum_.reset();
}

}  // namespace rt
