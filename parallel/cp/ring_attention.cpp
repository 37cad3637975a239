// Ring attention: the schedule, the double-buffered K/V hops and the fp32 state (DESIGN.md "Sequence layouts
// and the ring schedule"). Only rt::attn_* and rt ops touch tensor memory, so the same code runs on CPU and
// CUDA tensors; the Comm decides how bytes move.
//
// Forward on rank r: step i uses the K/V block of rank s = (r - i) mod cp. Step 0 is the rank's own block;
// the hop that brings step i+1's block is posted before step i's compute. The fp32 online-softmax state is
// carried across all steps: the first step that computes starts it and the last one finalises it.
//
// Backward on rank r: step i uses the block of rank b = (r - 1 - i) mod cp, so the rank's own block comes
// last (i = cp-1). The ring direction is the same as the forward (send to r+1, receive from r-1): the first
// hop (before step 0) sends the own K/V. At the start of step i one hop carries
//   [K,V for step i+1 | the finished-here dK,dV accumulator of block b(i-1)]   (fp32 accumulator)
// and the accumulator for block b(i) arrives during step i's compute; this rank's contribution is computed
// into a separate buffer and added when it lands. After the last step the accumulator of the own block
// holds every rank's contribution. With dkv_wire = bf16 the accumulator is rounded to bf16 for each hop
// and widened back to fp32 on arrival (cp-1 roundings for the block that travels furthest).
//
// Packed documents (set_documents) skip the hops nobody needs (parallel/schedule/ring_hops.h): a K/V hop runs only
// while a
// rank downstream sees the block, and the dK/dV accumulator of a block goes along its users only, then from the
// farthest one straight home (into grad_home_, added at the last step). Every rank posts one (possibly empty)
// peer exchange where the plain ring posts a ring exchange, so the exchanges stay paired. The other scheme of
// packed documents, the gather, is the private part in parallel/cp/ring_attention_gather.cpp.
#include "parallel/cp/ring_attention.h"

#include <algorithm>

#include "kernels/ops.h"
#include "parallel/comm/fault.h"
#include "parallel/cp/gather_scheme.h"
#include "parallel/cp/ring_timer.h"
#include "parallel/schedule/ring_schedule.h"

namespace rt {

namespace {

using Phase = RingTimer::Phase;

}  // namespace

RingAttention::RingAttention(Comm& cp, Layout layout, bool causal, const RingAttentionShape& shape, Arena& arena,
                             DType dkv_wire, bool gather)
    : cp_(cp), layout_(layout), causal_(causal), shape_(shape), kv_wire_(shape.dtype) {
  const int64_t B = shape.batch, n = shape.local_tokens, H = shape.heads, Hkv = shape.kv_heads, D = shape.head_dim;
  RT_CHECK(B > 0 && n > 0 && H > 0 && Hkv > 0 && D > 0,
           "ring attention: every dimension must be positive (B=" << B << " n=" << n << " H=" << H << " Hkv="
                                                                   << Hkv << " D=" << D << ")");
  RT_CHECK(H % Hkv == 0, "ring attention: local heads " << H << " is not a multiple of local KV heads " << Hkv);
  RT_CHECK(!(layout == Layout::zigzag && n % 2 != 0),
           "ring attention: zigzag needs an even number of local tokens, got " << n
                                                                               << "; use seq_len a multiple of 2*cp");
  RT_CHECK(arena.device().is_cpu() || shape.dtype != DType::i32, "ring attention: dtype must be f32 or bf16");
  RT_CHECK(dkv_wire == DType::f32 || dkv_wire == DType::bf16,
           "ring attention: the dK/dV accumulator travels as f32 or bf16 (parallel.dkv_wire), got "
               << dtype_name(dkv_wire));
  const bool ring = cp.size() > 1;
  // The forward's fp32 output accumulator and the backward's dQ accumulator are never live at once (the
  // forward finalises acc into out before it returns; the backward zeroes dq_acc first): one buffer.
  dq_acc_ = arena.alloc(DType::f32, {B, n, H, D}, "ring_attn.dq_acc / state.acc");  // (B, n, H, D) f32
  state_.acc = dq_acc_.view({B, H, n, D});                                            // (B, H, n, D) f32
  state_.m = arena.alloc(DType::f32, {B, H, n}, "ring_attn.state.m");         // (B, H, n) f32
  state_.l = arena.alloc(DType::f32, {B, H, n}, "ring_attn.state.l");         // (B, H, n) f32
  if (ring) {
    kv_buf_[0] = arena.alloc(shape.dtype, {2, B, n, Hkv, D}, "ring_attn.kv_hop0");  // (2, B, n, Hkv, D) K|V
    kv_buf_[1] = arena.alloc(shape.dtype, {2, B, n, Hkv, D}, "ring_attn.kv_hop1");  // (2, B, n, Hkv, D) K|V
  }
  kv_block_bytes_ = double(2 * B * n * Hkv * D) * double(dtype_size(shape.dtype));  // the K|V hop's bytes
  // The dK|dV accumulator as it travels: bf16 on a ring with dkv_wire bf16, else f32 (the bytes the planner counts).
  dkv_block_bytes_ = double(2 * B * n * Hkv * D) * double(dtype_size(ring && dkv_wire == DType::bf16 ? DType::bf16
                                                                                                     : DType::f32));
  if (!shape.forward_only) {  // the backward's buffers (eval and generate run none)
    grad_buf_[0] = arena.alloc(DType::f32, {2, B, n, Hkv, D}, "ring_attn.dkv_hop0");  // (2, B, n, Hkv, D) dK|dV
    if (ring) {
      grad_buf_[1] = arena.alloc(DType::f32, {2, B, n, Hkv, D}, "ring_attn.dkv_hop1");  // (2, B, n, Hkv, D) dK|dV
      grad_local_ = arena.alloc(DType::f32, {2, B, n, Hkv, D}, "ring_attn.dkv_local");   // (2, B, n, Hkv, D)
      if (dkv_wire == DType::bf16) {
        grad_wire_[0] = arena.alloc(DType::bf16, {2, B, n, Hkv, D}, "ring_attn.dkv_wire0");  // (2, B, n, Hkv, D)
        grad_wire_[1] = arena.alloc(DType::bf16, {2, B, n, Hkv, D}, "ring_attn.dkv_wire1");  // (2, B, n, Hkv, D)
      }
    }
    if (ring && cp.size() > 2)  // a dK/dV accumulator that comes home before the last step waits here
      grad_home_ = arena.alloc(dkv_wire, {2, B, n, Hkv, D}, "ring_attn.dkv_home");  // (2, B, n, Hkv, D)
    delta_ = arena.alloc(DType::f32, {B, H, n}, "ring_attn.delta");       // (B, H, n) f32
  }
  if (ring && gather) gather_ = make_ring_gather(shape, cp.size(), dkv_wire, arena);
  if (arena.device().is_cuda()) {
    // The document plans of one batch (kernels/attn_doc_plans.h), per rank: the ring's call against each source
    // (n x n rows); the gather's own call, its backward's two parts, the gathered rows (per sample in the merge form,
    // and all samples), the one-launch key list and the two halves of its fallback (Rmax = (cp - 1) n received rows
    // at most). About 1.5 B n bytes per n x n plan: 0.5 MiB at 16K tokens a rank, cp 8, gather on. A call that finds
    // no room computes its set-up itself, so the bound only decides what is cached.
    const int64_t P = cp.size(), square = attn_doc_plan_words(B, n, n);
    int64_t words = P * square, plans = P;
    if (gather_) {
      const int64_t rmax = (P - 1) * n, list = attn_second_kv_row(n) + rmax;
      words += 4 * square + attn_doc_plan_words(1, n, rmax) * B + 2 * attn_doc_plan_words(B, n, rmax) +
               2 * attn_doc_plan_words(B, n, list);
      plans += 8 + B;
    }
    words += 32 * plans;  // each plan starts on a 256-byte boundary
    doc_plan_space_ = arena.alloc(DType::i32, {words, 2}, "ring_attn.doc_plans");  // (words, 2) i32: int64 words
    doc_plans_ = AttnDocPlans(arena.device().index, doc_plan_space_.data, words);
  }
  hops_ = ring_hop_plan_full(cp.size());
  timer_ = make_ring_timer(arena.device());
}

RingAttention::~RingAttention() = default;

void RingAttention::set_documents(const int64_t* pos, const int64_t* doc_start, const int64_t* host_pos,
                                  const int64_t* host_doc_start, CpScheme scheme) {
  doc_pos_ = pos;
  doc_start_ = doc_start;
  doc_plans_.new_batch();  // new positions (the gather's key positions too, in plan_gather): no plan is valid
  hops_ = ring_hop_plan_full(cp_.size());
  scheme_ = CpScheme::ring;
  if (pos == nullptr) return;
  RT_CHECK(doc_start != nullptr, "ring attention: set_documents needs both positions and document starts");
  const int64_t* hp = host_pos ? host_pos : pos;
  const int64_t* hs = host_doc_start ? host_doc_start : doc_start;
  hops_ = ring_hop_plan(hp, hs, shape_.batch, shape_.local_tokens * cp_.size(), cp_.size());
  if (scheme != CpScheme::gather || cp_.size() == 1) return;  // one rank: nothing to gather
  RT_CHECK(kv_wire_ != DType::e4m3,
           "ring attention: set_documents asks for the gather scheme, but K/V travel in E4M3 (fp8.attention_kv: "
           "e4m3), which only the ring's K/V hops carry; the gather exchanges K/V rows in the activation dtype. Use "
           "parallel.cp_scheme: ring, or fp8.attention_kv: bf16");
  RT_CHECK(gather_, "ring attention: set_documents asks for the gather scheme, but this RingAttention was built "
                    "without its buffers; construct it with gather = true (the model does for parallel.cp_scheme: "
                    "gather or auto)");
  plan_gather(hp, hs);
  scheme_ = CpScheme::gather;
}

double RingAttention::planned_bytes_per_layer() const {
  const double dkv = dkv_block_bytes_;
  if (scheme_ == CpScheme::gather) {  // rows received over the ranks: K|V forward and backward, dK|dV back
    const double W = double(shape_.kv_heads * shape_.head_dim);
    return gather_->total_rows * 2.0 * W *
           (2.0 * double(dtype_size(shape_.dtype)) + double(dtype_size(gather_->wire)));
  }
  return hops_.bytes_per_layer(kv_block_bytes_, dkv);
}

double RingAttention::ring_bytes_per_layer() const {
  const double dkv = dkv_block_bytes_;
  return ring_hop_plan_full(cp_.size()).bytes_per_layer(kv_block_bytes_, dkv);
}

ExchangeHandle RingAttention::kv_hop_start(const Tensor& send, Tensor recv, int distance) {
  call_ring_bytes_ += double(send.nbytes());
  if (!doc_pos_) {
    call_sent_bytes_ += double(send.nbytes());
    return cp_.ring_exchange_start(send, recv);
  }
  const int cp = cp_.size(), r = cp_.rank();
  std::vector<PeerTransfer> sends, recvs;
  if (hops_.kv_hop(r - distance + 1, distance)) {  // this rank's block at distance-1 goes one further
    sends.push_back({send, (r + 1) % cp});
    call_sent_bytes_ += double(send.nbytes());
  }
  if (hops_.kv_hop(r - distance, distance)) recvs.push_back({recv, (r - 1 + cp) % cp});
  return cp_.peer_exchange_start(sends, recvs);
}

ExchangeHandle RingAttention::dkv_hop_start(const Tensor* wire, int step) {
  const Tensor& send = wire[(step - 1) % 2];
  call_ring_bytes_ += double(send.nbytes());
  if (!doc_pos_) {
    call_sent_bytes_ += double(send.nbytes());
    return cp_.ring_exchange_start(send, wire[step % 2]);
  }
  const int cp = cp_.size(), r = cp_.rank();
  std::vector<PeerTransfer> sends, recvs;
  const int held = ring_source(r, step, cp);  // the block whose accumulator this rank finished (distance `step`)
  const int h_held = hops_.kv_hops[size_t(held)];
  if (step <= h_held) {  // along the users, then from the farthest one home
    sends.push_back({send, step < h_held ? (r + 1) % cp : held});
    call_sent_bytes_ += double(send.nbytes());
  }
  const int next = ring_source(r, step + 1, cp);  // this step's block (distance step + 1)
  if (step < cp - 1 && step < hops_.kv_hops[size_t(next)]) recvs.push_back({wire[step % 2], (r - 1 + cp) % cp});
  if (step == hops_.kv_hops[size_t(r)])  // this rank's own accumulator comes home from its farthest user
    recvs.push_back({step == cp - 1 ? wire[step % 2] : grad_home_, (r + step) % cp});
  return cp_.peer_exchange_start(sends, recvs);
}

void RingAttention::set_fp8_backward(bool on, Arena* arena) {
  bwd_ops_ = attn_bwd_ops(on);
  const int64_t B = shape_.batch, n = shape_.local_tokens, H = shape_.heads, Hkv = shape_.kv_heads,
                D = shape_.head_dim;
  const bool in_scope = D == 128 && n > 0 && n % kAttnFp8RowBlock == 0;
  if (on && arena && arena->device().is_cuda() && in_scope && !fp8_bwd_space_.defined())
    fp8_bwd_space_ = arena->alloc(DType::e4m3, {attn_fp8_bwd_workspace_bytes(B, n, H, Hkv, D)},
                                  "ring_attn.fp8_bwd_codes");  // (bytes) Q^T, dO^T, K^T codes + factors
}

void RingAttention::set_kv_wire(DType wire, Arena& arena) {
  RT_CHECK(wire == shape_.dtype || wire == DType::e4m3,
           "ring attention: K/V travel in the activation dtype (" << dtype_name(shape_.dtype) << ") or e4m3 "
                                                                  "(fp8.attention_kv), got " << dtype_name(wire));
  RT_CHECK(wire != DType::e4m3 || scheme_ != CpScheme::gather,
           "ring attention: K/V in E4M3 (fp8.attention_kv: e4m3) travel on the ring's hops only, but the current "
           "documents run the gather scheme; use parallel.cp_scheme: ring, or fp8.attention_kv: bf16");
  kv_wire_ = wire;
  const int64_t B = shape_.batch, n = shape_.local_tokens, Hkv = shape_.kv_heads, D = shape_.head_dim;
  if (wire != DType::e4m3) {
    kv_block_bytes_ = double(2 * B * n * Hkv * D) * double(dtype_size(shape_.dtype));
    return;
  }
  kv_fp8_ = KvFp8Message(B, n, Hkv, D);
  kv_block_bytes_ = double(kv_fp8_.bytes());
  if (!kv_msg_[0].defined())
    kv_msg_[0] = arena.alloc(DType::e4m3, {kv_fp8_.bytes()}, "ring_attn.kv_fp8_msg0");  // (bytes) K|V codes+factors
  if (cp_.size() > 1 && !kv_msg_[1].defined())
    kv_msg_[1] = arena.alloc(DType::e4m3, {kv_fp8_.bytes()}, "ring_attn.kv_fp8_msg1");  // (bytes) K|V codes+factors
  if (!kv_buf_[0].defined())  // a single rank: the own K|V dequantized
    kv_buf_[0] = arena.alloc(shape_.dtype, {2, B, n, Hkv, D}, "ring_attn.kv_own_fp8");  // (2, B, n, Hkv, D) K|V
}

void RingAttention::round_own_kv(const Tensor& msg, const Tensor& k, const Tensor& v) {
  RingTimerScope t(*timer_, Phase::compute);
  kv_fp8_.pack(msg, k, v);
  kv_fp8_.unpack(kv_buf_[0], msg);
}

RingBlockPlan RingAttention::step_plan(int source) const {
  if (!doc_pos_) return ring_block_plan(layout_, causal_, cp_.rank(), source, shape_.local_tokens);
  const int64_t n = shape_.local_tokens, T = n * cp_.size();
  RingBlockPlan plan;
  plan.skip = !hops_.visible[size_t(cp_.rank() * cp_.size() + source)];
  plan.mask.docs.q_pos = doc_pos_ + cp_.rank() * n;
  plan.mask.docs.q_doc_start = doc_start_ + cp_.rank() * n;
  plan.mask.docs.k_pos = doc_pos_ + source * n;
  plan.mask.docs.q_stride = plan.mask.docs.k_stride = T;
  return plan;
}

void RingAttention::finish_call() {
  sent_bytes_ += call_sent_bytes_, ring_bytes_ += call_ring_bytes_;
  last_call_.sent_bytes = call_sent_bytes_, last_call_.ring_bytes = call_ring_bytes_;
  call_sent_bytes_ = call_ring_bytes_ = 0;
  timer_->end_call();
  if (timer_->pending() > kRingTimerMaxPending) collect_timings();  // bounds the timer's event pool
}

void RingAttention::collect_timings() const {
  collected_.clear();
  timer_->collect(collected_);
  for (RingTimings t : collected_) {
    t.calls = 1;
    t.steps = cp_.size();
    t.sent_bytes = last_call_.sent_bytes, t.ring_bytes = last_call_.ring_bytes;
    last_call_ = t;
    timings_.accumulate(t);
  }
  timings_.sent_bytes = sent_bytes_, timings_.ring_bytes = ring_bytes_;
}

const RingTimings& RingAttention::timings() const {
  collect_timings();
  return timings_;
}

const RingTimings& RingAttention::last_call_timings() const {
  collect_timings();
  return last_call_;
}

void RingAttention::reset_timings() {
  timer_->discard();
  timings_.reset();
  sent_bytes_ = ring_bytes_ = 0;
}

// The K (index 0) or V (index 1) half of a packed (2, B, n, Hkv, D) buffer, as (B, n, Hkv, D).
Tensor RingAttention::half(const Tensor& packed, int index) const {
  return packed.slice(index, index + 1).view({shape_.batch, shape_.local_tokens, shape_.kv_heads, shape_.head_dim});
}

void RingAttention::check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) const {
  const int64_t B = shape_.batch, n = shape_.local_tokens, H = shape_.heads, Hkv = shape_.kv_heads,
                D = shape_.head_dim;
  check_shape(q, {B, n, H, D}, op, "q");
  check_shape(k, {B, n, Hkv, D}, op, "k");
  check_shape(v, {B, n, Hkv, D}, op, "v");
  check_dtype(q, shape_.dtype, op, "q");
  check_dtype(k, shape_.dtype, op, "k");
  check_dtype(v, shape_.dtype, op, "v");
}

void RingAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor out, Tensor lse) {
  check_inputs(q, k, v, "ring_attention.forward");
  check_shape(out, {shape_.batch, shape_.local_tokens, shape_.heads, shape_.head_dim}, "ring_attention.forward",
              "out");
  check_shape(lse, {shape_.batch, shape_.heads, shape_.local_tokens}, "ring_attention.forward", "lse");
  const int cp = cp_.size(), r = cp_.rank();
  const AttnDocPlanScope plans(&doc_plans_);  // every layer's calls share the batch's document set-up
  maybe_inject_fault("ring_attention.forward");
  if (scheme_ == CpScheme::gather) {
    gather_forward(q, k, v, out, lse);
    finish_call();
    return;
  }
  // kv_wire e4m3: every step computes on dequantized K/V, the own block's in kv_buf_[0] and the hops carry messages.
  const bool fp8_kv = kv_wire_ == DType::e4m3;
  Tensor* wire = fp8_kv ? kv_msg_ : kv_buf_;  // what the K/V hops send and receive, double-buffered
  Tensor k_own = k, v_own = v;                // (B, n, Hkv, D) the own block as the steps read it
  if (fp8_kv) {
    round_own_kv(kv_msg_[0], k, v);
    k_own = half(kv_buf_[0], 0), v_own = half(kv_buf_[0], 1);
  }
  if (cp == 1) {  // one block: the fused whole forward (no state reset / finalize passes where it applies)
    {
      RingTimerScope t(*timer_, Phase::compute);
      const RingBlockPlan plan = step_plan(ring_source(r, 0, cp));
      if (plan.skip) {
        if (doc_pos_) ++skipped_steps_;
        attn_state_reset(state_);
        attn_fwd_finalize(state_, out, lse);
      } else {
        attn_fwd_whole(q, k_own, v_own, state_, plan.mask, out, lse);
      }
    }
    finish_call();
    return;
  }
  // The first and last steps that compute: the first starts the state (attn_fwd_block_first: no reset pass, no
  // state read), the last finalizes it (attn_fwd_block_last: no state written, no finalize pass); a lone computing
  // step is attn_fwd_whole. Where every step is skipped, the state is reset and finalized.
  int first_step = -1, last_step = -1;
  for (int step = 0; step < cp; ++step)
    if (!step_plan(ring_source(r, step, cp)).skip) {
      if (first_step < 0) first_step = step;
      last_step = step;
    }
  const bool fused_ends = first_step >= 0;
  ExchangeHandle hop;
  {
    RingTimerScope t(*timer_, Phase::compute);
    if (!fused_ends) attn_state_reset(state_);
    if (cp > 1 && !fp8_kv) {
      // Pack the own K/V once; the hop that brings step 1's block is posted before step 0's compute.
      copy_cast(half(kv_buf_[0], 0), k);
      copy_cast(half(kv_buf_[0], 1), v);
    }
  }
  if (cp > 1) {
    RingTimerScope t(*timer_, Phase::comm);
    hop = kv_hop_start(wire[0], wire[1], 1);
  }
  for (int step = 0; step < cp; ++step) {
    Tensor k_blk = k_own, v_blk = v_own;  // (B, n, Hkv, D)
    const Tensor* cur = nullptr;         // the received block (step > 0)
    if (step > 0) {
      RingTimerScope t(*timer_, Phase::comm);
      cp_.wait(hop);
      cur = &wire[step % 2];
      if (step + 1 < cp) hop = kv_hop_start(*cur, wire[(step + 1) % 2], step + 1);
    }
    maybe_inject_fault("ring_attention.forward_step");  // with an exchange in flight
    const RingBlockPlan plan = step_plan(ring_source(r, step, cp));
    RingTimerScope t(*timer_, Phase::compute);
    if (cur) {
      if (fp8_kv && !plan.skip) kv_fp8_.unpack(kv_buf_[1], *cur);  // a skipped step's message may not have come
      const Tensor& blk = fp8_kv ? kv_buf_[1] : *cur;
      k_blk = half(blk, 0), v_blk = half(blk, 1);
    }
    if (plan.skip) {
      if (doc_pos_) ++skipped_steps_;
    } else if (step == first_step && step == last_step) {
      attn_fwd_whole(q, k_blk, v_blk, state_, plan.mask, out, lse);
    } else if (step == first_step) {
      attn_fwd_block_first(q, k_blk, v_blk, state_, plan.mask);
    } else if (step == last_step) {
      attn_fwd_block_last(q, k_blk, v_blk, state_, plan.mask, out, lse);
    } else {
      attn_fwd_block(q, k_blk, v_blk, state_, plan.mask);
    }
  }
  if (!fused_ends) {
    RingTimerScope t(*timer_, Phase::compute);
    attn_fwd_finalize(state_, out, lse);
  }
  finish_call();
}

void RingAttention::backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& dout, const Tensor& lse, Tensor dq, Tensor dk, Tensor dv) {
  const char* op = "ring_attention.backward";
  RT_CHECK(!shape_.forward_only, "ring_attention.backward: this attention was built forward-only (eval, generate) "
                                 "and holds no backward buffers");
  check_inputs(q, k, v, op);
  const int64_t B = shape_.batch, n = shape_.local_tokens, H = shape_.heads, Hkv = shape_.kv_heads,
                D = shape_.head_dim;
  check_shape(out, {B, n, H, D}, op, "out");
  check_shape(dout, {B, n, H, D}, op, "dout");
  check_shape(lse, {B, H, n}, op, "lse");
  check_shape(dq, {B, n, H, D}, op, "dq");
  check_shape(dk, {B, n, Hkv, D}, op, "dk");
  check_shape(dv, {B, n, Hkv, D}, op, "dv");

  const int cp = cp_.size(), r = cp_.rank();
  const AttnDocPlanScope plans(&doc_plans_);  // the forward's document set-up, reused
  const AttnFp8BwdWorkspaceScope fp8_codes(&fp8_bwd_space_);  // fp8.attention's codes on CUDA (set_fp8_backward)
  maybe_inject_fault("ring_attention.backward");
  if (scheme_ == CpScheme::gather) {
    gather_backward(q, k, v, out, dout, lse, dq, dk, dv);
    finish_call();
    return;
  }
  ExchangeHandle kv_hop, grad_hop;
  // kv_wire e4m3: as the forward (the same rounding of the own K/V, so the same dequantized blocks).
  const bool fp8_kv = kv_wire_ == DType::e4m3;
  Tensor* wire = fp8_kv ? kv_msg_ : kv_buf_;  // what the K/V hops send and receive, double-buffered
  Tensor k_own = k, v_own = v;                // (B, n, Hkv, D) the own block as the last step reads it
  if (fp8_kv) {
    round_own_kv(kv_msg_[cp > 1 ? 1 : 0], k, v);
    k_own = half(kv_buf_[0], 0), v_own = half(kv_buf_[0], 1);
  }
  {
    RingTimerScope t(*timer_, Phase::compute);
    fill(dq_acc_, 0.f);
    attn_bwd_delta(out, dout, delta_);  // once per layer
    if (cp > 1 && !fp8_kv) {
      // Step 0 uses the block of rank r-1: the own K/V is sent forward.
      copy_cast(half(kv_buf_[1], 0), k);
      copy_cast(half(kv_buf_[1], 1), v);
    }
  }
  if (cp > 1) {
    RingTimerScope t(*timer_, Phase::comm);
    kv_hop = kv_hop_start(wire[1], wire[0], 1);
  }
  Tensor acc;  // (2, B, n, Hkv, D) f32: the accumulator of the block used in the current step
  for (int step = 0; step < cp; ++step) {
    const bool own_block = step == cp - 1;
    Tensor k_blk = k_own, v_blk = v_own;  // (B, n, Hkv, D)
    const Tensor* cur = nullptr;         // the received block (not the own one)
    const bool wire_bf16 = grad_wire_[0].defined();
    if (step > 0 && wire_bf16) {
      RingTimerScope t(*timer_, Phase::compute);
      copy_cast(grad_wire_[(step - 1) % 2], grad_buf_[(step - 1) % 2]);  // the one rounding per hop
    }
    if (!own_block || step > 0) {  // a single-rank ring never communicates
      RingTimerScope t(*timer_, Phase::comm);
      if (!own_block) {
        cp_.wait(kv_hop);
        cur = &wire[step % 2];
        if (step + 1 < cp - 1) kv_hop = kv_hop_start(*cur, wire[(step + 1) % 2], step + 2);
      }
      // This rank is done with the previous step's accumulator: pass it on, and receive this step's block's
      // accumulator from the rank that used the block one step earlier.
      if (step > 0) {
        grad_hop = dkv_hop_start(wire_bf16 ? grad_wire_ : grad_buf_, step);
      }
    }

    // This rank's contribution goes straight into the accumulator at step 0 (nobody has touched that block
    // yet) and into grad_local_ afterwards, to be added when the travelling accumulator lands.
    Tensor contrib = step == 0 ? grad_buf_[0] : grad_local_;
    const int source = ring_source(r, step + 1, cp);
    const RingBlockPlan plan = step_plan(source);
    {
      RingTimerScope t(*timer_, Phase::compute);
      if (cur) {
        if (fp8_kv && !plan.skip) kv_fp8_.unpack(kv_buf_[1], *cur);  // a skipped step's message may not have come
        const Tensor& blk = fp8_kv ? kv_buf_[1] : *cur;
        k_blk = half(blk, 0), v_blk = half(blk, 1);
      }
      if (plan.skip) {
        if (doc_pos_) ++skipped_steps_;
        fill(contrib, 0.f);
      } else {  // overwrites contrib (on an H100/H200 without a separate zero-fill where the mask allows)
        bwd_ops_.fresh(q, k_blk, v_blk, dout, lse, delta_, dq_acc_, half(contrib, 0), half(contrib, 1), plan.mask);
      }
    }
    if (step > 0) {
      {
        RingTimerScope t(*timer_, Phase::comm);
        cp_.wait(grad_hop);
      }
      acc = grad_buf_[step % 2];
      RingTimerScope t(*timer_, Phase::compute);
      const int h = hops_.kv_hops[size_t(source)];  // this step's block's farthest user (cp-1 in the plain ring)
      if (own_block && h >= 1 && h < cp - 1) copy_cast(acc, grad_home_);  // came home early
      else if (wire_bf16) copy_cast(acc, grad_wire_[step % 2]);
      if (own_block ? h == 0 : step >= h) acc = contrib;  // no accumulator travelled: this rank's part is all
      else if (!plan.skip) add_inplace(acc, contrib);
    } else {
      acc = contrib;
    }
  }
  {
    RingTimerScope t(*timer_, Phase::compute);
    copy_cast(dq, dq_acc_);
    copy_cast(dk, half(acc, 0));
    copy_cast(dv, half(acc, 1));
  }
  finish_call();
}

}  // namespace rt
