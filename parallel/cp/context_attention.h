// Context-parallel attention over the cp group = ring x a2a (DESIGN.md "All-to-all and the hybrid"). With
// parallel.cp_a2a = u > 1 the u ranks of an all-to-all group exchange heads for tokens (DeepSpeed-Ulysses):
//   forward:  Q, K, V go from sequence-sharded (this rank's n tokens, every local head) to head-sharded (the
//             group's u*n tokens, H/u query heads), ring attention runs over the cp/u ring on those, and O comes back;
//   backward: Q, K, V, O and dO go out again, the ring backward runs, and dQ, dK, dV come back.
// With u = 1 it is RingAttention over the cp group, unchanged.
// Overlap: heads are independent, so with G = head_groups > 1 the exchange is pipelined by head groups (group g holds
// query heads [g*hq/G, (g+1)*hq/G) and its own KV heads [g*hk/G, (g+1)*hk/G)): group g+1's Q/K/V (dO...) travel
// while the ring runs on group g, and group g's O (dQ, dK, dV) travel while group g+1 computes. Only the first
// group's way out and the last group's way back are exposed. Every group is a separate ring call over its heads, so
// the results are bit-identical to one call over all of them (G = 1: one blocking exchange each way).
// GQA: all-to-all rank a takes query heads [a*H/u, (a+1)*H/u). Its KV heads are the fewest groups that serve them:
// with g = H/Hkv query heads per KV head and s = gcd(H/u, g), it holds H/u/s KV heads, its j-th being local KV head
// (a*H/u + j*s)/g. When u * (H/u/s) > Hkv some KV heads go to several ranks (replicated: the u-degree is not capped
// by the KV heads); their dK/dV come back in f32 and are summed in f32 before the one rounding.
#pragma once
#include <memory>

#include "parallel/cp/ring_attention.h"
#include "parallel/schedule/head_exchange.h"

namespace rt {

class ContextAttention {
 public:
  // ring: the cp/u ring (the whole cp group when u = 1); a2a: the all-to-all group of u ranks (size 1: none).
  // shape: this rank's tokens (n = seq_len / cp) and local heads, as the model holds them.
  // head_groups: 0 = pipeline_head_groups (the model's); 1 forces the blocking exchange (tests compare the two).
  // gather: the ring may run the gather scheme of packed documents (RingAttention's gather buffers;
  // parallel/schedule/cp_scheme.h).
  ContextAttention(Comm& ring, Comm& a2a, Layout layout, bool causal, const RingAttentionShape& shape, Arena& arena,
                   DType dkv_wire = DType::f32, int head_groups = 0, bool gather = false);

  // q (B,n,H,D), k and v (B,n,Hkv,D): this rank's tokens. out (B,n,H,D) written. lse: B*H*n f32 written; with
  // u > 1 it holds the head-sharded LSE (G, B, H/u/G, u*n) that backward() reads back (no other reader).
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse);
  // dq (B,n,H,D), dk and dv (B,n,Hkv,D) written for this rank's tokens.
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                const Tensor& lse, Tensor dq, Tensor dk, Tensor dv);

  // The whole sample's document mask, (B, cp*n) in cp-rank order (RingAttention::set_documents): a ring shard of
  // the cp/u ring is the u consecutive cp ranks of one group, so the ring reads the same arrays, and the scheme
  // (ring or gather) applies to the ring over the head-sharded tokens.
  void set_documents(const int64_t* pos, const int64_t* doc_start, const int64_t* host_pos = nullptr,
                     const int64_t* host_doc_start = nullptr, CpScheme scheme = CpScheme::ring) {
    ring_->set_documents(pos, doc_start, host_pos, host_doc_start, scheme);
  }
  int64_t skipped_steps() const { return ring_->skipped_steps(); }

  // The ring's timings plus the exchange: its packing in compute_s, the time blocked posting it or waiting for it
  // (the part the other head group's ring did not hide) in exposed_a2a_s. calls counts the ring's calls: G per
  // forward or backward.
  const RingTimings& timings() const;
  void reset_timings();

  int a2a_degree() const { return x_.u; }
  const HeadExchangeShape& exchange() const { return x_; }
  RingAttention& ring() { return *ring_; }

 private:
  Comm& a2a_;
  RingAttentionShape shape_;  // sequence-sharded (the model's)
  HeadExchangeShape x_;
  std::unique_ptr<RingAttention> ring_;
  DType grad_dtype_ = DType::f32;  // of dq_h_, dk_h_, dv_h_ and their exchange: f32 when replicated
  // Head-sharded, u > 1 only; nh = u*n tokens.
  // Head-sharded, one contiguous block per head group g (hqg = hq/G, hkg = hk/G); group() views block g.
  Tensor q_h_, out_h_, dout_h_;  // (G, B, nh, hqg, D) act dtype
  Tensor k_h_, v_h_;             // (G, B, nh, hkg, D) act dtype
  Tensor dq_h_;                  // (G, B, nh, hqg, D) grad_dtype_
  Tensor dk_h_, dv_h_;           // (G, B, nh, hkg, D) grad_dtype_
  Tensor dkv_sum_;               // (2, B, n, Hkv, D) f32: replicas' dK | dV summed (replicated only)
  // Exchange buffers, raw storage viewed per use. The way out of group g uses out_[g % 2] (two in flight), the way
  // back uses back_. G = 1: one pair of (u, B, n, W) with W up to (3hq + 2hk) D act elements, shared by all three.
  struct Wire {
    Tensor send, recv;  // (u, B, n, W/G) each
  };
  Wire out_[2], back_;
  std::unique_ptr<RingTimer> timer_;
  mutable RingTimings a2a_sum_, combined_;
  mutable std::vector<RingTimings> collected_;

  Tensor group(const Tensor& heads, int g) const;  // block g of a (G, B, nh, h, D) tensor, as (B, nh, h, D)
  Tensor wire(const Tensor& storage, DType dtype, int64_t width) const;  // (u * B * n * width) view of storage
  // Row copies between a sequence-sharded (B, n, heads, D) tensor and chunk `peer` of a (u, B, n, W) wire.
  void seq_to_wire(const Tensor& seq, int64_t heads, int64_t head0, int64_t count, Tensor& w, int64_t W,
                   int peer, int64_t col);
  void wire_to_seq(const Tensor& w, int64_t W, int peer, int64_t col, Tensor& seq, int64_t heads, int64_t head0,
                   int64_t count, bool accumulate);
  // Row copies between a head-sharded (B, u*n, heads, D) tensor and chunk `peer` of a wire (all its heads).
  void heads_to_wire(const Tensor& h, int64_t heads, Tensor& w, int64_t W, int peer, int64_t col);
  void wire_to_heads(const Tensor& w, int64_t W, int peer, int64_t col, Tensor& h, int64_t heads);
  // K or V of every peer: its KV heads of group g in runs of consecutive local heads.
  void kv_to_wire(const Tensor& seq, Tensor& w, int64_t W, int64_t col, int g);
  ExchangeHandle exchange_start(const Tensor& send, Tensor recv);  // timed as exposed a2a (posting can block)
  void exchange_wait(ExchangeHandle handle);                        // timed as exposed a2a
  void end_call();  // marks the end of one forward or backward (its packing and waits) on the timer
  void collect() const;
};

}  // namespace rt
