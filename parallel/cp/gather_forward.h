// The gather scheme's gathered forward call (DESIGN.md "Document masks"), shared by RingAttention's gather mode
// (parallel/cp/ring_attention_gather.cpp) and its one-GPU benchmark (bench/doc_gather_steps.cuh), so both run the same
// calls.
// The own call (attn_fwd_whole over the rank's own keys) has written out and lse of every row; the gathered keys
// reach only the query rows [lo, hi) of gathered_query_rows (parallel/schedule/gather_plan.h). This runs the gathered
// call on
// those rows alone, one attn_fwd_whole per sample on the sample's contiguous rows [lo, hi) (no pass over the other
// rows: no state and no finalize of all n rows), into the scratch out2 / lse2, then attn_fwd_merge into out / lse.
// Rows of the range that see no gathered key come out of the call with lse2 = -inf and keep the own result.
#pragma once
#include "kernels/attention.h"
#include "parallel/schedule/gather_plan.h"

namespace rt {

// q (B, n, H, D), out (B, n, H, D), lse (B, H, n) f32: the own call's result, merged in place.
// gk, gv (B, R, Hkv, D): the gathered rows. mask: the gathered call's document mask for all n rows (docs.q_pos,
// q_doc_start of row 0 of sample 0, k_pos of the gathered rows; no q or k range).
// rows: [lo, hi), not empty. out2 (>= B (hi - lo) H D elements, out's dtype) and lse2 (>= B H (hi - lo) f32): scratch,
// viewed (B, hi - lo, H, D) and (B, H, hi - lo). scratch: an AttnState of q's shape (used where no fused kernel runs).
void gathered_fwd_merge(const Tensor& q, const Tensor& gk, const Tensor& gv, const AttnMask& mask,
                        const QueryRowRange& rows, const Tensor& out2, const Tensor& lse2, const AttnState& scratch,
                        Tensor out, Tensor lse);

// Which form the gather forward takes for a rank of n rows that receives R key rows:
//   merge form (true): own call attn_fwd_whole, then gathered_fwd_merge on the query rows [lo, hi) they reach;
//   state form (false): own call attn_fwd_block_first (every row's fp32 state), gathered call attn_fwd_block_last.
// Measured on the H200 (cp 8, 16 heads, d128; bench/results/2026-12-02-h200-doc-cp8-gather.md): the merge form cuts
// a light gathered call (a few hundred to ~1800 rows) from 0.10-0.14 ms to 0.05-0.09 ms, but a heavy one (thousands
// of rows of long documents cut over the ranks) ran up to 1.8x slower than the state form, whatever its row range.
// So: the merge form when nothing is gathered or R <= n / 8, else the state form.
inline bool gather_merge_form(int64_t received_rows, int64_t n) { return 8 * received_rows <= n; }

}  // namespace rt
