// The form of the gather scheme's one-launch calls (issue 46): whether a receiving rank's one-launch forward runs
// attn_fwd_work_list instead of attn_fwd_whole_two_kv, and its one-launch backward attn_bwd_work_list instead of
// attn_bwd_block_fresh_two_kv. One rule for RingAttention (parallel/cp/ring_attention_gather.cpp: plan_gather builds
// the lists where the list ops run the call, gather_fwd_work_list / gather_bwd_work_list say which form ran) and for
// bench_doc_ring_steps --scheme gather (bench/doc_gather_steps.cuh: the form its paths hold), so the two cannot drift
// apart (tests/unit/parallel/test_gather_list_form.cpp; the bench's --plan-only line, checked by
// bench/doc_attention_side_by_side.py --self-test).
//   list_runs: the list op runs the call (kernels/attn_{fwd,bwd}_work_list_runs.h: on the CPU every call; on CUDA
//              fwd / bwd v5's list mode: sm_90a, bf16, D 64 / 128, 128 own and gathered rows, the backward not in
//              deterministic mode), asked for the call's shape: B samples of n own query and key rows, R gathered
//              rows (padded as the call is: gather_call_key_rows), a key list of attn_second_kv_row(n) + R rows.
//   form:      the list where the knob is on (RT_ATTN_WORK_LIST unset or 1, gather_work_list_from_env) and the list
//              op runs the call; the backward also not with the FP8 backward (RingAttention::set_fp8_backward: the
//              list op has no FP8 form). Elsewhere the two-source call.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attn_bwd_work_list_runs.h"
#include "kernels/attn_fwd_work_list_runs.h"
#include "kernels/tensor.h"

namespace rt {

// The one-launch call's key list: the own rows, the gap up to attn_second_kv_row(n), the R gathered rows.
inline int64_t gather_one_launch_key_rows(int64_t n, int64_t R) { return attn_second_kv_row(n) + R; }

// Whether attn_fwd_work_list runs the one-launch forward of B samples, H heads of d = D, n own rows, R gathered rows.
inline bool gather_fwd_list_runs(const Device& device, DType act, int64_t B, int64_t H, int64_t D, int64_t n,
                                 int64_t R) {
  return attn_fwd_work_list_runs(device, act, B, H, D, n, n, R, gather_one_launch_key_rows(n, R));
}

// Whether attn_bwd_work_list runs the one-launch backward of the same call with Hkv K/V heads.
inline bool gather_bwd_list_runs(const Device& device, DType act, int64_t B, int64_t H, int64_t Hkv, int64_t D,
                                 int64_t n, int64_t R) {
  return attn_bwd_work_list_runs(device, act, B, H, Hkv, D, n, n, R, gather_one_launch_key_rows(n, R));
}

// The forward's form: attn_fwd_work_list (true) or attn_fwd_whole_two_kv.
constexpr bool gather_fwd_list_form(bool list_on, bool list_runs) { return list_on && list_runs; }

// The backward's form: attn_bwd_work_list (true) or attn_bwd_block_fresh_two_kv.
constexpr bool gather_bwd_list_form(bool list_on, bool fp8_backward, bool list_runs) {
  return list_on && !fp8_backward && list_runs;
}

}  // namespace rt
