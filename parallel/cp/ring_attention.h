// Ring attention over the cp communicator (DESIGN.md "Sequence layouts and the ring schedule").
// With cp = 1 it is plain flash attention on the local tokens. Kernels know nothing of ranks; this
// class owns the schedule, the double-buffered K/V hops and the fp32 state. With packed documents it runs either
// scheme of parallel/schedule/cp_scheme.h: the ring (here) or the gather (parallel/cp/ring_attention_gather.cpp).
#pragma once
#include <memory>
#include <string>

#include "kernels/arena.h"
#include "kernels/attention.h"
#include "kernels/attn_doc_plans.h"
#include "parallel/comm/comm.h"
#include "parallel/cp/attn_bwd_ops.h"
#include "parallel/cp/kv_fp8_message.h"
#include "parallel/cp/ring_timing.h"
#include "parallel/schedule/attention_shape.h"
#include "parallel/schedule/cp_scheme.h"
#include "parallel/schedule/layout.h"
#include "parallel/schedule/ring_hops.h"
#include "parallel/schedule/ring_schedule.h"

namespace rt {

struct RingGather;  // the gather scheme's buffers and plan (parallel/cp/gather_scheme.h)

class RingAttention {
 public:
  // Allocates the packed K/V double buffers, the fp32 state, dQ and the travelling dK/dV from `arena`.
  // dkv_wire: dtype of the travelling dK/dV accumulator on the wire (f32, or bf16 to halve those bytes; it
  // is accumulated in fp32 on every rank either way and rounded to bf16 once per hop); the gather scheme's returned
  // dK/dV rows travel in it too (rounded once).
  // gather: also allocate the gather scheme's buffers (parallel/cp/gather_scheme.h: about (cp-1) x the K/V block in the
  // activation dtype, twice that in f32 for dK/dV, and two exchange buffers of the widest), so that set_documents
  // may choose CpScheme::gather; without them it refuses to.
  RingAttention(Comm& cp, Layout layout, bool causal, const RingAttentionShape& shape, Arena& arena,
                DType dkv_wire = DType::f32, bool gather = false);
  ~RingAttention();

  // q (B,n,H,D), k and v (B,n,Hkv,D): this rank's tokens in layout order.
  // out (B,n,H,D) written; lse (B,H,n) f32 written.
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse);
  // dq (B,n,H,D), dk and dv (B,n,Hkv,D) written (in q's dtype), for this rank's tokens.
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                const Tensor& lse, Tensor dq, Tensor dk, Tensor dv);

  // Document mask for the following forward / backward calls (DESIGN.md "Document masks"): pos and doc_start
  // (B, cp*n) int64, the whole sample in ring order (rank s's n tokens at columns [s*n, (s+1)*n)): each
  // token's global position and its document's first position. Host memory on a CPU ring; on CUDA device memory
  // with host copies in host_pos / host_doc_start (the ring decides on the host which steps see no pair).
  // Any layout works, since the mask is exact in positions. A step whose every pair is masked skips its compute,
  // and K/V hops that no rank downstream needs are skipped with dK/dV sent straight home from the block's farthest
  // user (parallel/schedule/ring_hops.h; every rank derives the same plan, host_pos being a permutation per sample).
  // scheme = gather (needs the constructor's gather = true; a ring of one rank ignores it) runs the calls of
  // parallel/cp/ring_attention_gather.cpp instead: every rank receives exactly the key rows its queries see from every
  // other
  // rank in one exchange (parallel/schedule/gather_plan.h), and returns their dK/dV in one. Every rank of the ring must
  // pass
  // the same scheme. nullptr turns the document mask off (and the scheme back to the ring). The arrays must outlive
  // the calls.
  void set_documents(const int64_t* pos, const int64_t* doc_start, const int64_t* host_pos = nullptr,
                     const int64_t* host_doc_start = nullptr, CpScheme scheme = CpScheme::ring);
  // The scheme of the following calls: gather only with documents set with it on a ring of more than one rank.
  CpScheme scheme() const { return scheme_; }
  // The gather scheme's backward splits this rank's own call at own key row m (parallel/cp/gather_backward.h): part A,
  // keys [0, m), before the gathered call, part B, keys [m, n), while the dK/dV return is in flight. Each
  // set_documents with the gather scheme chooses m for the batch (parallel/schedule/gather_plan.h choose_own_bwd_split;
  // 0 = one
  // call); set_gather_own_split(m) forces m (0 <= m <= n) for the following set_documents calls, -1 restores the
  // choice (tests and benchmarks). Needs the constructor's gather = true.
  void set_gather_own_split(int64_t m);
  int64_t gather_own_split() const;  // the current plan's m (0 without the gather scheme)
  // The gather scheme's forward as one launch over the own keys and the gathered rows after the exchange
  // (parallel/cp/gather_forward.h), instead of the own call under the exchange then the gathered call: each
  // set_documents with the gather scheme chooses it for the batch (parallel/schedule/gather_plan.h
  // gather_fwd_one_launch);
  // set_gather_fwd_one_launch(0 or 1) forces it off or on (where the rank receives rows) for the following
  // set_documents calls, -1 restores the choice (tests and benchmarks). Needs the constructor's gather = true.
  void set_gather_fwd_one_launch(int mode);
  bool gather_fwd_one_launch() const;  // the current plan's form (false without the gather scheme)
  // Whether that one launch runs attn_fwd_work_list over the batch's work list (kernels/attn_work_list.h) instead of
  // attn_fwd_whole_two_kv: the default, unless RT_ATTN_WORK_LIST=0 was in the environment when the ring was
  // constructed, where the list op runs the call (attn_fwd_work_list_runs: on CUDA sm_90a, bf16, D 64 / 128, 128 own
  // and gathered rows).
  bool gather_fwd_work_list() const;
  // The same for the backward: the own call (whole) and the gathered call as one attn_bwd_block_fresh_two_kv after
  // the exchange, the return waited for after it (parallel/schedule/gather_plan.h gather_bwd_one_launch).
  void set_gather_bwd_one_launch(int mode);
  // fp8.attention (kernels/attn_fp8.h): the following backward calls run the FP8 forms of the block ops (dV, dQ, dK
  // on E4M3 operands; their contracts are the same); off by default. On a CUDA arena (given, and still in its
  // allocation phase) turning it on also takes the CUDA path's code workspace (attn_fp8_bwd_workspace_bytes of this
  // ring's B, n, H, Hkv, D) from `arena` where the shape is in the sm_90a kernel's scope (D 128, n a multiple of 128);
  // the calls a CUDA ring makes are in that scope only with cp 1 and no documents (the ops refuse the rest).
  void set_fp8_backward(bool on, Arena* arena = nullptr);
  bool fp8_backward() const { return bwd_ops_.fp8; }
  // fp8.attention_kv (issue 47 "Communication"): the dtype K and V travel in between the ranks. shape.dtype (the
  // activation dtype, the default) sends them as they are. e4m3: every call (forward and backward) first rounds this
  // rank's own K and V to E4M3 (kernels/kv_fp8_wire.h: a factor per sample, 128-row block of the rank's n rows and K/V
  // head) and dequantizes them into the block the kernels read; the ring's K/V hops carry the codes and factors
  // (parallel/cp/kv_fp8_message.h, about half the bf16 bytes) and each receiver dequantizes them before the step
  // that reads them. Every step, the own block included, computes on the dequantized K and V, so one rank and every
  // ring give the same result up to f32 reassociation where the 128-row blocks hold the same tokens (n and a zigzag
  // chunk multiples of 128); dK and dV are what the backward computes on them (passed straight through to the
  // unrounded K and V). dK/dV travel as dkv_wire says, unchanged. Not the gather scheme (set_documents refuses it:
  // the gather exchanges K/V rows in the activation dtype). Takes the messages (and on a single rank the dequantized
  // block) from `arena`, still in its allocation phase.
  void set_kv_wire(DType wire, Arena& arena);
  DType kv_wire() const { return kv_wire_; }
  bool gather_bwd_one_launch() const;  // the current plan's form (false without the gather scheme)
  // Whether that one launch runs attn_bwd_work_list over the batch's backward work list (kernels/attn_work_list.h):
  // the default too (not with RT_ATTN_WORK_LIST=0 when the ring was constructed), where attn_bwd_work_list_runs
  // says the list op runs the call, not with the FP8 backward.
  bool gather_bwd_work_list() const;
  // Ready flags (kernels/attn_ready_flags.h; the gather scheme's one-launch work-list forward on CUDA ranks, only
  // with RT_ATTN_READY_FLAGS=1 when the ring was constructed: experimental): the forward calls that ran with them since
  // construction; and the check of their watchdog's fault word, for a place that waits for the step anyway (a host
  // wait: it reads the word; nothing is read before the first flagged call). A wait for gathered rows that timed out
  // (parallel.timeout_s) raises there, naming `where`, this rank, the batch's forward call (the layer) and the source,
  // and clears the word; its rows were NaN.
  int64_t gather_ready_flag_calls() const;
  void check_ready_fault(const std::string& where);
  // Ring steps (forward and backward) skipped since construction because no pair of them was visible (gather: of
  // the two calls per pass, the own call with no visible pair and the gathered call of a rank that receives nothing).
  int64_t skipped_steps() const { return skipped_steps_; }
  // The hops the current documents need (every hop without documents), and the bytes per layer (forward +
  // backward, summed over the ranks) they move against the plain ring's (gather: the gathered rows' K/V twice,
  // forward and backward, and their dK/dV once).
  const RingHopPlan& hop_plan() const { return hops_; }
  double planned_bytes_per_layer() const;
  double ring_bytes_per_layer() const;

  // Compute vs exposed-communication time (parallel/cp/ring_timing.h): summed over every call since
  // construction or reset_timings(), and of the latest call alone. Reading them resolves the calls' timings
  // (on CUDA the host waits once, for the latest call's last event); the calls themselves never wait.
  const RingTimings& timings() const;
  const RingTimings& last_call_timings() const;
  // Starts the sum over. Calls not collected yet are dropped without waiting (then last_call_timings() keeps
  // the latest call that was collected).
  void reset_timings();

 private:
  Comm& cp_;
  Layout layout_;
  bool causal_;
  RingAttentionShape shape_;
  // Buffers documented with their shapes in ring_attention.cpp.
  AttnState state_;
  // (2, B, n, Hkv, D) packed K|V, double-buffered. With kv_wire e4m3 they hold dequantized blocks instead (the hops
  // carry kv_msg_): [0] this rank's own K|V, [1] the received block of the current step; [0] also on a single rank.
  Tensor kv_buf_[2];
  DType kv_wire_;          // set_kv_wire: shape_.dtype or e4m3
  KvFp8Message kv_fp8_;    // the layout of an e4m3 K|V message of this ring's shape
  Tensor kv_msg_[2];       // (kv_fp8_.bytes()) e4m3 K|V codes + factors, double-buffered (kv_wire e4m3 only)
  double kv_block_bytes_ = 0;  // one K|V block as it travels: (2, B, n, Hkv, D) in the activation dtype, or a message
  Tensor grad_buf_[2];   // (2, B, n, Hkv, D) f32 travelling dK|dV accumulator, double-buffered
  Tensor grad_local_;    // (2, B, n, Hkv, D) f32 this rank's dK|dV contribution, added when the accumulator lands
  Tensor grad_wire_[2];  // (2, B, n, Hkv, D) bf16 the accumulator on the wire (dkv_wire = bf16 only)
  Tensor dq_acc_;        // (B, n, H, D) f32; the same storage as state_.acc (forward only)
  Tensor delta_;         // (B, H, n) f32
  std::unique_ptr<RingTimer> timer_;
  // Filled lazily from timer_ by collect_timings() when read, hence mutable.
  mutable RingTimings timings_, last_call_;
  mutable std::vector<RingTimings> collected_;  // scratch of collect_timings()

  const int64_t* doc_pos_ = nullptr;        // (B, cp*n) see set_documents
  const int64_t* doc_start_ = nullptr;      // (B, cp*n)
  RingHopPlan hops_;                        // which blocks travel how far (every hop without documents)
  CpScheme scheme_ = CpScheme::ring;        // of the current documents
  // The document set-up of every distinct call of the current batch, made by its first call and read by every
  // layer's forward and backward (kernels/attn_doc_plans.h); set_documents starts a new batch. CUDA only.
  Tensor doc_plan_space_;                   // (words, 2) i32 holding int64 words: see the constructor for the size
  AttnDocPlans doc_plans_;
  std::unique_ptr<RingGather> gather_;      // the gather scheme's buffers and plan (constructed with gather = true)
  AttnBwdOps bwd_ops_;                      // the backward's block ops (set_fp8_backward)
  // (attn_fp8_bwd_workspace_bytes) e4m3 bytes: the FP8 backward's codes and factors on CUDA (set_fp8_backward)
  Tensor fp8_bwd_space_;
  double dkv_block_bytes_ = 0;  // one (2, B, n, Hkv, D) dK|dV block in the dtype it travels in
  Tensor grad_home_;     // (2, B, n, Hkv, D) dkv_wire dtype: this rank's dK|dV accumulator when it comes home early
  double sent_bytes_ = 0, ring_bytes_ = 0;  // since reset_timings(): this rank's bytes sent, the plain ring's
  double call_sent_bytes_ = 0, call_ring_bytes_ = 0;  // of the latest call
  int64_t skipped_steps_ = 0;

  RingBlockPlan step_plan(int source) const;  // the layout's plan, or the document mask's
  // The K/V hop that brings the block at ring distance `distance` (sends `send`, this rank's block at distance-1,
  // receives into `recv`), skipping the sides nobody needs; the dK/dV hop of backward step `step` (>= 1).
  ExchangeHandle kv_hop_start(const Tensor& send, Tensor recv, int distance);
  // kv_wire e4m3: quantizes the own k, v into `msg` and dequantizes them into kv_buf_[0] (the block every step on the
  // own K/V reads; compute time).
  void round_own_kv(const Tensor& msg, const Tensor& k, const Tensor& v);
  ExchangeHandle dkv_hop_start(const Tensor* wire, int step);
  Tensor half(const Tensor& packed, int index) const;  // K (0) or V (1) of a packed buffer, (B, n, Hkv, D)
  void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) const;
  void finish_call();            // marks the end of a call on the timer (no wait)
  // The gather scheme (parallel/cp/ring_attention_gather.cpp): its plan for the current documents, and its two passes.
  void plan_gather(const int64_t* host_pos, const int64_t* host_doc_start);
  void gather_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse);
  void gather_forward_flagged(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse);
  void gather_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                       const Tensor& lse, Tensor dq, Tensor dk, Tensor dv);
  // Both passes: pack the K|V rows each peer needs and post the exchange; after its wait, unpack the received rows
  // into the gathered buffer in position order, (2, B, R, Hkv, D).
  ExchangeHandle gather_kv_exchange_start(const Tensor& k, const Tensor& v);
  Tensor gathered_kv();
  AttnMask own_mask() const;       // this rank's queries against its own keys (the document mask)
  AttnMask gathered_mask() const;  // ... against its gathered rows
  AttnMask key_list_mask() const;  // ... against its own keys and gathered rows as one list (one-launch forward)
  void collect_timings() const;  // resolves the pending calls into last_call_ and timings_
};

}  // namespace rt
