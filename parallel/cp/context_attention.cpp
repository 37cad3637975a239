// The all-to-all head exchange around ring attention (parallel/cp/context_attention.h).
//
// Wire layout of one exchange: (u, B, n, W) elements, chunk p for (or from) all-to-all rank p; a token row of a chunk
// holds W elements, the tensors it carries side by side (e.g. [Q heads of p | its K heads | its V heads]). A rank's
// own chunk is copied by the communicator. Head-sharded tensors are (B, u*n, heads, D): the tokens of rank p of the
// group at rows [p*n, (p+1)*n) of each sample, i.e. the ring shard of the cp/u ring in cp-rank order, which is the
// order of the loader's ring order and of the document arrays.
//
// Only copy_rows, copy_cast, fill and the Comm touch memory, so the same code runs on CPU and CUDA tensors. Per head
// group g, the forward sends Q, K and V in one exchange (one latency, one message per peer) and O back in a second;
// the backward sends Q, K, V, O and dO in one and dQ, dK, dV back in one. The pipeline (G = 2 groups):
//   post out(0); post out(1); wait out(0); ring(0); post back(0); wait out(1); ring(1); wait back(0); post back(1);
//   wait back(1)
// i.e. out(g+1) is posted before ring(g) and back(g) after it, and each is waited only when its data is needed. On
// NCCL the exchange runs on the a2a communicator's comm stream, ordered after the compute launched before its post,
// and a wait makes the compute stream (not the host) wait: out(1) travels under ring(0), back(0) under ring(1). On
// MPI the host-staged MPI_Ialltoall progresses when MPI is entered (the ring's own waits, or the next wait).
#include "parallel/cp/context_attention.h"

#include <numeric>
#include <string>

#include "kernels/ops.h"
#include "parallel/cp/ring_timer.h"

namespace rt {

namespace {
using Phase = RingTimer::Phase;
}  // namespace

ContextAttention::ContextAttention(Comm& ring, Comm& a2a, Layout layout, bool causal, const RingAttentionShape& shape,
                                   Arena& arena, DType dkv_wire, int head_groups, bool gather)
    : a2a_(a2a), shape_(shape) {
  const int u = a2a.size();
  x_ = head_exchange_shape(shape, u, head_groups);
  const int64_t G = x_.head_groups;
  RingAttentionShape ring_shape = shape;
  if (u > 1) {  // one ring call per head group
    ring_shape.local_tokens = shape.local_tokens * u;
    ring_shape.heads = x_.q_heads / G;
    ring_shape.kv_heads = x_.kv_heads / G;
  }
  ring_ = std::make_unique<RingAttention>(ring, layout, causal, ring_shape, arena, dkv_wire, gather);
  timer_ = make_ring_timer(arena.device());
  if (u == 1) return;
  const int64_t B = shape.batch, n = shape.local_tokens, nh = u * n, D = shape.head_dim, hqg = x_.q_heads / G,
                hkg = x_.kv_heads / G;
  const DType act = shape.dtype;
  grad_dtype_ = x_.replicated ? DType::f32 : act;
  q_h_ = arena.alloc(act, {G, B, nh, hqg, D}, "a2a.q_heads");         // (G, B, u*n, hq/G, D)
  out_h_ = arena.alloc(act, {G, B, nh, hqg, D}, "a2a.out_heads");     // (G, B, u*n, hq/G, D)
  k_h_ = arena.alloc(act, {G, B, nh, hkg, D}, "a2a.k_heads");         // (G, B, u*n, hk/G, D)
  v_h_ = arena.alloc(act, {G, B, nh, hkg, D}, "a2a.v_heads");         // (G, B, u*n, hk/G, D)
  if (!shape.forward_only) {  // the backward's (eval and generate run none)
    dout_h_ = arena.alloc(act, {G, B, nh, hqg, D}, "a2a.dout_heads");     // (G, B, u*n, hq/G, D)
    dq_h_ = arena.alloc(grad_dtype_, {G, B, nh, hqg, D}, "a2a.dq_heads");  // (G, B, u*n, hq/G, D)
    dk_h_ = arena.alloc(grad_dtype_, {G, B, nh, hkg, D}, "a2a.dk_heads");  // (G, B, u*n, hk/G, D)
    dv_h_ = arena.alloc(grad_dtype_, {G, B, nh, hkg, D}, "a2a.dv_heads");  // (G, B, u*n, hk/G, D)
    if (x_.replicated)
      dkv_sum_ = arena.alloc(DType::f32, {2, B, n, shape.kv_heads, D}, "a2a.dkv_replica_sum");  // (2, B, n, Hkv, D)
  }
  // Row widths in 4-byte words of one group: the way out is at most the backward's [Q|K|V|O|dO] in act, the way
  // back the forward's O in act or the backward's [dQ|dK|dV] in grad_dtype_.
  const int64_t out_bytes = (3 * hqg + 2 * hkg) * D * int64_t(dtype_size(act));
  const int64_t back_bytes = std::max(hqg * D * int64_t(dtype_size(act)),
                                      (hqg + 2 * hkg) * D * int64_t(dtype_size(grad_dtype_)));
  auto alloc_wire = [&](int64_t bytes, const char* name) {
    const int64_t words = (bytes + 3) / 4;
    Wire w;
    w.send = arena.alloc(DType::f32, {u, B, n, words}, (std::string(name) + ".send").c_str());  // (u, B, n, W)
    w.recv = arena.alloc(DType::f32, {u, B, n, words}, (std::string(name) + ".recv").c_str());  // (u, B, n, W)
    return w;
  };
  if (G == 1) {  // one exchange in flight at a time: one pair serves both ways
    out_[0] = back_ = alloc_wire(std::max(out_bytes, back_bytes), "a2a");
  } else {
    out_[0] = alloc_wire(out_bytes, "a2a.out0");
    out_[1] = alloc_wire(out_bytes, "a2a.out1");
    back_ = alloc_wire(back_bytes, "a2a.back");
  }
}

Tensor ContextAttention::group(const Tensor& heads, int g) const {
  return heads.slice(g, g + 1).view({heads.shape[1], heads.shape[2], heads.shape[3], heads.shape[4]});
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

void ContextAttention::kv_to_wire(const Tensor& seq, Tensor& w, int64_t W, int64_t col, int g) {
  const int64_t hq = x_.q_heads, s = x_.kv_group, ratio = shape_.heads / shape_.kv_heads;
  const int64_t hkg = x_.kv_heads / x_.head_groups, j0 = g * hkg;
  for (int peer = 0; peer < x_.u; ++peer)
    for (int64_t j = j0; j < j0 + hkg;) {  // runs of consecutive source heads: one copy each
      const int64_t first = (peer * hq + j * s) / ratio;
      int64_t len = 1;
      while (j + len < j0 + hkg && (peer * hq + (j + len) * s) / ratio == first + len) ++len;
      seq_to_wire(seq, shape_.kv_heads, first, len, w, W, peer, col + (j - j0) * shape_.head_dim);
      j += len;
    }
}

ExchangeHandle ContextAttention::exchange_start(const Tensor& send, Tensor recv) {
  RingTimerScope t(*timer_, Phase::comm);
  return a2a_.all_to_all_start(send, recv);
}

void ContextAttention::exchange_wait(ExchangeHandle handle) {
  RingTimerScope t(*timer_, Phase::comm);
  a2a_.wait(handle);
}

void ContextAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse) {
  if (x_.u == 1) return ring_->forward(q, k, v, out, lse);
  const int64_t B = shape_.batch, n = shape_.local_tokens, H = shape_.heads, D = shape_.head_dim, hq = x_.q_heads,
                u = x_.u, G = x_.head_groups, hqg = hq / G, hkg = x_.kv_heads / G;
  check_shape(q, {B, n, H, D}, "context_attention.forward", "q");
  check_shape(out, {B, n, H, D}, "context_attention.forward", "out");
  RT_CHECK(lse.numel() == B * H * n, "context_attention.forward: lse " << lse.shape_str() << " must hold B*H*n");
  const DType act = shape_.dtype;
  Tensor lse_h = lse.view({G, B, hqg, u * n});  // (G, B, hq/G, u*n): group g's ring call writes block g
  // Way out of group g: a token row of chunk p = [p's Q heads of g | its K heads of g | its V heads of g].
  const int64_t W = (hqg + 2 * hkg) * D;
  auto post_out = [&](int g) {
    Wire& x = out_[g % 2];
    Tensor send = wire(x.send, act, W), recv = wire(x.recv, act, W);
    {
      RingTimerScope t(*timer_, Phase::compute);
      for (int p = 0; p < u; ++p) seq_to_wire(q, H, p * hq + g * hqg, hqg, send, W, p, 0);
      kv_to_wire(k, send, W, hqg * D, g);
      kv_to_wire(v, send, W, (hqg + hkg) * D, g);
    }
    return exchange_start(send, recv);
  };
  // Way back of group g: chunk p = this rank's heads of g for p's tokens.
  const int64_t Wo = hqg * D;
  Tensor osend = wire(back_.send, act, Wo), orecv = wire(back_.recv, act, Wo);
  auto land_back = [&](int g) {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) wire_to_seq(orecv, Wo, p, 0, out, H, p * hq + g * hqg, hqg, false);
  };
  ExchangeHandle next_out = post_out(0), back;
  for (int g = 0; g < G; ++g) {
    const ExchangeHandle this_out = next_out;
    if (g + 1 < G) next_out = post_out(g + 1);  // travels under this group's ring
    exchange_wait(this_out);
    Tensor qg = group(q_h_, g), kg = group(k_h_, g), vg = group(v_h_, g), og = group(out_h_, g);
    {
      RingTimerScope t(*timer_, Phase::compute);
      const Tensor recv = wire(out_[g % 2].recv, act, W);
      for (int p = 0; p < u; ++p) {
        wire_to_heads(recv, W, p, 0, qg, hqg);
        wire_to_heads(recv, W, p, hqg * D, kg, hkg);
        wire_to_heads(recv, W, p, (hqg + hkg) * D, vg, hkg);
      }
    }
    ring_->forward(qg, kg, vg, og, lse_h.slice(g, g + 1).view({B, hqg, u * n}));
    if (g > 0) {  // the previous group's O travelled under this group's ring
      exchange_wait(back);
      land_back(g - 1);
    }
    {
      RingTimerScope t(*timer_, Phase::compute);
      for (int p = 0; p < u; ++p) heads_to_wire(og, hqg, osend, Wo, p, 0);
    }
    back = exchange_start(osend, orecv);
  }
  exchange_wait(back);
  land_back(int(G) - 1);
  end_call();
}

void ContextAttention::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& dout, const Tensor& lse, Tensor dq, Tensor dk, Tensor dv) {
  if (x_.u == 1) return ring_->backward(q, k, v, out, dout, lse, dq, dk, dv);
  RT_CHECK(!shape_.forward_only, "context_attention.backward: this attention was built forward-only (eval, "
                                 "generate) and holds no backward buffers");
  const int64_t B = shape_.batch, n = shape_.local_tokens, H = shape_.heads, Hkv = shape_.kv_heads,
                D = shape_.head_dim, hq = x_.q_heads, u = x_.u, G = x_.head_groups, hqg = hq / G,
                hkg = x_.kv_heads / G;
  const char* op = "context_attention.backward";
  check_shape(dq, {B, n, H, D}, op, "dq");
  check_shape(dk, {B, n, Hkv, D}, op, "dk");
  check_shape(dv, {B, n, Hkv, D}, op, "dv");
  const DType act = shape_.dtype;
  Tensor lse_h = lse.view({G, B, hqg, u * n});  // (G, B, hq/G, u*n) as forward() wrote it
  // Way out of group g: chunk p = [Q | K | V | O | dO] heads of g for p.
  const int64_t W = (3 * hqg + 2 * hkg) * D;
  auto post_out = [&](int g) {
    Wire& x = out_[g % 2];
    Tensor send = wire(x.send, act, W), recv = wire(x.recv, act, W);
    {
      RingTimerScope t(*timer_, Phase::compute);
      for (int p = 0; p < u; ++p) {
        const int64_t head0 = p * hq + g * hqg;
        seq_to_wire(q, H, head0, hqg, send, W, p, 0);
        seq_to_wire(out, H, head0, hqg, send, W, p, (hqg + 2 * hkg) * D);
        seq_to_wire(dout, H, head0, hqg, send, W, p, (2 * hqg + 2 * hkg) * D);
      }
      kv_to_wire(k, send, W, hqg * D, g);
      kv_to_wire(v, send, W, (hqg + hkg) * D, g);
    }
    return exchange_start(send, recv);
  };
  // Way back of group g: chunk p = [dQ | dK | dV] of g for p's tokens, in grad_dtype_ (f32 when K/V heads were
  // replicated; then G = 1).
  const int64_t Wg = (hqg + 2 * hkg) * D;
  Tensor gsend = wire(back_.send, grad_dtype_, Wg), grecv = wire(back_.recv, grad_dtype_, Wg);
  const int64_t s = x_.kv_group, ratio = H / Hkv;
  Tensor dk_sum = x_.replicated ? dkv_sum_.slice(0, 1).view({B, n, Hkv, D}) : dk;
  Tensor dv_sum = x_.replicated ? dkv_sum_.slice(1, 2).view({B, n, Hkv, D}) : dv;
  auto land_back = [&](int g) {
    RingTimerScope t(*timer_, Phase::compute);
    for (int p = 0; p < u; ++p) wire_to_seq(grecv, Wg, p, 0, dq, H, p * hq + g * hqg, hqg, false);
    // dK, dV: each KV head from every rank that held it, summed in f32 when there were several (replicated), then
    // rounded once into dk / dv; otherwise each head arrives exactly once and is copied.
    for (int p = 0; p < u; ++p)
      for (int64_t j = 0; j < hkg; ++j) {
        const int64_t head = (p * hq + (g * hkg + j) * s) / ratio;
        wire_to_seq(grecv, Wg, p, (hqg + j) * D, dk_sum, Hkv, head, 1, x_.replicated);
        wire_to_seq(grecv, Wg, p, (hqg + hkg + j) * D, dv_sum, Hkv, head, 1, x_.replicated);
      }
  };
  if (x_.replicated) {
    RingTimerScope t(*timer_, Phase::compute);
    fill(dkv_sum_, 0.f);
  }
  ExchangeHandle next_out = post_out(0), back;
  for (int g = 0; g < G; ++g) {
    const ExchangeHandle this_out = next_out;
    if (g + 1 < G) next_out = post_out(g + 1);  // travels under this group's ring
    exchange_wait(this_out);
    Tensor qg = group(q_h_, g), kg = group(k_h_, g), vg = group(v_h_, g), og = group(out_h_, g),
           dog = group(dout_h_, g), dqg = group(dq_h_, g), dkg = group(dk_h_, g), dvg = group(dv_h_, g);
    {
      RingTimerScope t(*timer_, Phase::compute);
      const Tensor recv = wire(out_[g % 2].recv, act, W);
      for (int p = 0; p < u; ++p) {
        wire_to_heads(recv, W, p, 0, qg, hqg);
        wire_to_heads(recv, W, p, hqg * D, kg, hkg);
        wire_to_heads(recv, W, p, (hqg + hkg) * D, vg, hkg);
        wire_to_heads(recv, W, p, (hqg + 2 * hkg) * D, og, hqg);
        wire_to_heads(recv, W, p, (2 * hqg + 2 * hkg) * D, dog, hqg);
      }
    }
    ring_->backward(qg, kg, vg, og, dog, lse_h.slice(g, g + 1).view({B, hqg, u * n}), dqg, dkg, dvg);
    if (g > 0) {  // the previous group's gradients travelled under this group's ring
      exchange_wait(back);
      land_back(g - 1);
    }
    {
      RingTimerScope t(*timer_, Phase::compute);
      for (int p = 0; p < u; ++p) {
        heads_to_wire(dqg, hqg, gsend, Wg, p, 0);
        heads_to_wire(dkg, hkg, gsend, Wg, p, hqg * D);
        heads_to_wire(dvg, hkg, gsend, Wg, p, (hqg + hkg) * D);
      }
    }
    back = exchange_start(gsend, grecv);
  }
  exchange_wait(back);
  land_back(int(G) - 1);
  if (x_.replicated) {
    RingTimerScope t(*timer_, Phase::compute);
    copy_cast(dk, dk_sum);
    copy_cast(dv, dv_sum);
  }
  end_call();
}

void ContextAttention::end_call() {
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
}

const RingTimings& ContextAttention::timings() const {
  collect();
  combined_ = ring_->timings();
  combined_.accumulate(a2a_sum_);
  return combined_;
}

void ContextAttention::reset_timings() {
  ring_->reset_timings();
  timer_->discard();
  a2a_sum_.reset();
}

}  // namespace rt
