// The gather scheme's state on one rank (DESIGN.md "Document masks"; RingAttention runs it in
// parallel/cp/ring_attention_gather.cpp): its buffers, allocated with RingAttention for the most rows a plan can move,
// and the current batch's plan.
//
// Wire layout: one chunk per peer, peers in rank order, in rows of W = Hkv*D elements. The chunk between a sender s
// and a receiver r holds the rows r receives from s over the batch: the K rows, then the V rows (2 x rows), each
// half ordered by sample, then by r's pieces from s in position order (parallel/schedule/gather_plan.h). The backward
// returns
// the rows' dK|dV in the same chunk layout, so the receiver's chunk is the sender's reverse chunk.
// Gathered rows: (2, B, R, Hkv, D), sample b's rows [0, received_b) in position order, the rest padding: zero K/V and
// position T (after every query, so no query sees it and the kernels skip or mask it like any invisible key).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/arena.h"
#include "parallel/schedule/attention_shape.h"
#include "parallel/schedule/gather_plan.h"

namespace rt {

class GatherSideStream;  // parallel/cp/gather_side_stream.h

struct RingGather {
  // Buffers (P ranks, n tokens per rank, Rmax = (P - 1) * n rows per sample at most, W = Hkv * D):
  Tensor kv;            // (2, B, Rmax, Hkv, D) act dtype: the gathered K|V, viewed (2, B, R, Hkv, D)
  Tensor dkv;           // (2, B, Rmax, Hkv, D) f32: the gathered call's dK|dV, viewed (2, B, R, Hkv, D)
  Tensor wire_send;     // (words) f32 storage of (2, B * Rmax, W) rows of the widest of act / dkv_wire: the chunks
                        // sent (K|V out; the backward's dK|dV back)
  Tensor wire_recv;     // (words) the same, received
  Tensor send_index;    // (2 * B * Rmax) i32: per sent chunk row, the row of this rank's packed (2 * B * n, W) K|V
  Tensor unpack_index;  // (2 * B * Rmax) i32: per gathered row (2, B, R), the received chunk row, -1 for padding
  Tensor return_index;  // (2 * B * Rmax) i32: per returned chunk row, the gathered dK|dV row (2, B, R)
  Tensor k_pos;         // (B, Rmax, 2) i32 holding (B, R) int64: the gathered rows' positions, padding T
  Tensor k_list_pos;    // (B, S + Rmax, 2) i32 holding (B, S + R) int64, S = attn_second_kv_row(n): the one-launch
                        // calls' key list (own rows' positions, T in the gap, the gathered rows' positions)
  Tensor out2;          // (B, n, H, D) act dtype: the gathered call's out, viewed (B, M, H, D), M = q_rows' length
  Tensor lse2;          // (B, H, n) f32: its lse, viewed (B, H, M); both merged into out / lse (attn_fwd_merge)
  DType act = DType::f32, wire = DType::f32;  // of K/V and of the returned dK/dV rows
  int64_t rows_max = 0;                       // Rmax

  // The plan of the current documents (RingAttention::plan_gather):
  int64_t rows = 0;                 // R: the most rows a sample of this rank receives, padded to
                                    // gather_call_key_rows (parallel/schedule/gather_plan.h)
  QueryRowRange q_rows;             // [lo, hi): the local query rows that see a gathered key, union over the samples
  std::vector<int64_t> send_rows;   // (P) rows this rank sends to each peer, summed over the samples
  std::vector<int64_t> recv_rows;   // (P) rows it receives from each peer
  std::vector<int64_t> send_at;     // (P) first wire row of each peer's sent chunk (a chunk is 2 x rows)
  std::vector<int64_t> recv_at;     // (P) the same for the received chunks
  int64_t sent_total = 0, received_total = 0;  // sums of send_rows / recv_rows
  double total_rows = 0;            // rows received over all ranks and samples (the plan's bytes)
  // The own backward call's split (parallel/cp/gather_backward.h): part A = own key rows [0, own_split) before the
  // gathered call, part B = [own_split, n) under the dK/dV return; 0 = one call. Chosen per batch by
  // own_bwd_split_for_batch (parallel/schedule/gather_plan.h), or own_split_forced when >= 0
  // (RingAttention::set_gather_own_split).
  int64_t own_split = 0;
  int64_t own_split_forced = -1;
  // The forward in one launch over own and gathered keys after the exchange (parallel/cp/gather_forward.h), chosen per
  // batch by gather_fwd_one_launch (parallel/schedule/gather_plan.h) where the rank receives rows, or forced (0 / 1) by
  // fwd_one_launch_forced >= 0 (RingAttention::set_gather_fwd_one_launch).
  bool fwd_one_launch = false;
  int fwd_one_launch_forced = -1;
  // The backward in one launch over own and gathered keys after the exchange (attn_bwd_block_fresh_two_kv, the own
  // call whole), chosen per batch by gather_bwd_one_launch (parallel/schedule/gather_plan.h) where the rank receives
  // rows, or
  // forced by bwd_one_launch_forced >= 0 (RingAttention::set_gather_bwd_one_launch).
  bool bwd_one_launch = false;
  int bwd_one_launch_forced = -1;
  // The one-launch forward over a work list (attn_fwd_work_list, kernels/attn_work_list.h) instead of
  // attn_fwd_whole_two_kv: on by default (issue 46: the H200 measured the list kernel at 0.93-0.97x two_kv's time,
  // the same bits); RT_ATTN_WORK_LIST=0 in the environment when the ring is constructed turns it off
  // (gather_work_list_from_env). plan_gather builds the list (parallel/schedule/doc_work_list.h) once per batch where
  // the forward runs in one launch and the list op runs the call (kernels/attn_fwd_work_list_runs.h: on CUDA, fwd
  // v5's list mode needs sm_90a, bf16, D 64 / 128 and 128 own and gathered rows); elsewhere that launch stays
  // attn_fwd_whole_two_kv.
  bool work_list_on = true;
  Tensor work_list;             // (work_list_max) i32, allocated only when on: the list's words, viewed
                                // (work_list_words)
  int64_t work_list_words = 0;  // of the current plan (0: none built)
  int64_t work_list_tasks = 0;  // its task count (the CUDA kernel's grid: tasks x heads units)
  // The one-launch backward over the backward's work list (attn_bwd_work_list, the forward's list mirrored:
  // doc_bwd_work_list) instead of attn_bwd_block_fresh_two_kv, with the same knob (so on by default: the host op gives
  // attn_bwd_block_fresh_two_kv's bits, tests/mpi/test_ring_gather_work_list.cpp), where the list op runs the call
  // (attn_bwd_work_list_runs: on CUDA bwd v5's list mode, sm_90a, bf16, D 64 / 128, 128 own and gathered rows, not
  // deterministic; elsewhere the one launch stays attn_bwd_block_fresh_two_kv), and not with the FP8 backward
  // (RingAttention::set_fp8_backward: the list op has no FP8 form).
  Tensor bwd_work_list;             // (bwd_work_list_max) i32, allocated only when on and the ring has a backward:
                                    // the backward list's words, viewed (bwd_work_list_words)
  int64_t bwd_work_list_words = 0;  // of the current plan (0: none built)
  // Ready flags (issue 46; kernels/attn_ready_flags.h), CUDA ranks: the one-launch forward over the work list is
  // launched before the exchange's wait, its own keys running under the exchange; the wait, the unpack and the flag
  // go on a side stream (GatherSideStream) that the list kernel's persistent form leaves SMs to. Off unless
  // RT_ATTN_READY_FLAGS=1 when the ring was constructed (gather_ready_flags_from_env): experimental. On one H200
  // (ranks sharing it) the flagged calls equal the unflagged within reassociation since the delivery kernels are
  // loaded before the list kernel (lazy loading had kept the flag down) and the cut tasks have their merge scratch;
  // they stay off until a node shows NCCL's kernels and the delivery fit in the SMs the list kernel leaves. CPU
  // ranks never use them (the CPU op ignores flags: cp_.wait orders the rows before the call).
  bool ready_flags_on = false;
  Tensor ready;                  // (1) i32 on the device (CUDA arenas only): the call's epoch once its rows are in
  Tensor fault;                  // (2) i32 on the device, 8-byte aligned: the watchdog's fault word
  // The own-first list cuts each task with both own and gathered tiles into two parts merged like a split
  // (parallel/schedule/doc_work_list_split.h doc_work_list_own_first): their merge scratch, for at most every query
  // tile cut (two slots each). Allocated with the flags only (about 2 x B x n x H x (D + 2) x 4 bytes).
  Tensor split_state;            // (2 * B * ceil(n / 128), H, 128, D + 2) f32: the parts' states
  Tensor split_count;            // (2 * B * ceil(n / 128), H, 8) i32: zeroed once, the kernel leaves them zero
  int64_t work_list_slots = 0;   // the current forward list's merge slots (AttnWorkList::merge_slots)
  bool ready_zeroed = false;     // ready, fault and split_count zeroed (at the first flagged call, on the compute stream)
  uint32_t epoch = 0;            // the latest flagged call's epoch: 1, 2, ... over the ring's lifetime
  uint32_t batch_first_epoch = 1;  // the first epoch after the latest set_documents (names a faulted call's layer)
  int64_t ready_flag_calls = 0;  // flagged forward calls since construction
  double ready_timeout_s = 0;    // the latest flagged call's watchdog limit (parallel.timeout_s: watchdog_timeout_s)
  std::shared_ptr<GatherSideStream> side;  // the side stream (made at the first flagged call)
};

// RT_ATTN_READY_FLAGS in the environment: 1 (experimental): the gather scheme's one-launch work-list forward runs with
// ready flags on CUDA ranks (RingGather::ready_flags_on); unset or 0 (the default): wait, unpack, then the launch; any
// other value is refused, naming both. Read once per RingAttention (make_ring_gather).
bool gather_ready_flags_from_env();

// RT_ATTN_WORK_LIST in the environment: unset or 1 (the default): the gather scheme's one launches over work lists
// (RingGather::work_list_on); 0: attn_fwd_whole_two_kv / attn_bwd_block_fresh_two_kv; any other value is refused,
// naming both. Read once per RingAttention (make_ring_gather) and by bench_doc_ring_steps --scheme gather.
bool gather_work_list_from_env();

// The buffers for a ring of `cp` ranks (cp > 1) and RingAttention's shape, from `arena`.
std::unique_ptr<RingGather> make_ring_gather(const RingAttentionShape& shape, int cp, DType dkv_wire, Arena& arena);

}  // namespace rt
