// The host builder of a document-masked attention call's work list (kernels/attn_work_list.h; issue 46,
// bench/NOTES.md "Packed documents at cp = 8, one persistent launch per rank and direction"): for every 128-row query
// tile of every sample, the 128-row key tiles of the call's key list that hold a key visible to some row of the tile,
// as ascending segments (own keys before gathered ones). Pure and host-only: every position is known on the host when
// a batch's documents are set (RingAttention::set_documents), so the list is built once per step and read by every
// layer's call. The CPU op (kernels/cpu/attention/attn_fwd_work_list.cpp) and the CUDA kernel run the same list. The
// backward's list (key-tile-major, for bwd v5's units) is the forward's mirrored: doc_bwd_work_list below, run by
// attn_bwd_work_list (kernels/cpu/attention/attn_bwd_work_list.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attn_work_list.h"
#include "parallel/schedule/doc_work_list_split.h"

namespace rt {

// One call's positions (the document mask of attn_fwd_whole_two_kv, kernels/attention.h AttnDocs): key j of the list
// is visible to query i of sample b iff q_doc_start[b, i] <= k_pos[b, j] <= q_pos[b, i].
struct DocWorkListInputs {
  int64_t B = 0, Nq = 0;
  int64_t Nk = 0;         // the call's own key rows (k, v): list rows [0, Nk); the gap after them holds no key
  int64_t list_rows = 0;  // Nk with one source, else attn_second_kv_row(Nk) + the gathered rows (k2, v2)
  std::vector<int64_t> q_pos, q_doc_start;  // (B, q_stride) the queries' positions and document starts
  std::vector<int64_t> k_pos;               // (B, k_stride) the key list's positions (the gap rows after an own
                                            // partial tile go into its key range only: a position no query sees)
  int64_t q_stride = 0, k_stride = 0;       // elements between samples; 0: Nq and list_rows
};

// The list for a call: a task per 128-row query tile (the last one partial) that sees at least one key, with the key
// tiles that hold a visible key (exactly those: a tile meets the query tile iff one of its keys lies in
// [doc start, largest position] of one of the tile's runs of rows of one document; the runs' union is kept as
// disjoint sorted intervals and a key tile, its positions sorted, is tested against those overlapping its range),
// merged into segments of consecutive tiles of one source (own: tiles below attn_second_kv_row(Nk) / 128, source -1;
// gathered: from there, source 0). Tasks are ordered heaviest first (most key tiles; ties by sample, then q_row) and
// their segments are stored in that order. Every task has parts = 1, merge_slot = -1. O(B list_rows log 128 + query
// tiles x key tiles x (log runs + overlapping runs x log 128)). The row bounds and key ranges are filled
// (doc_work_list_bounds).
AttnWorkList doc_work_list(const DocWorkListInputs& in);

// The same list with split tasks where `split` asks (parallel/schedule/doc_work_list_split.h: the rule, its time model
// and its knobs; split.on = false, the default, gives doc_work_list(in)): the unsplit list, its tasks' parts from
// doc_work_list_split_parts, cut and reordered heaviest first by doc_work_list_apply_splits, merge slots numbered
// densely (list.merge_slots of them). Splitting is off unless asked: the gather path builds unsplit lists (the CUDA op
// needs a split scratch for a list with splits, attn_work_list.h AttnSplitScratch).
AttnWorkList doc_work_list(const DocWorkListInputs& in, const DocWorkListSplit& split);

// The forward list's order: heaviest_first, doc_work_list(in) (the default, every caller's); own_first,
// doc_work_list_own_first over it (parallel/schedule/doc_work_list_split.h: every unit of own work before any unit
// that reads a gathered tile, the mixed tasks cut in two), for a call launched under ready flags before its gathered
// rows land (the exchange under the launch). `costs` gives the unit costs that rank the tasks (its `on` is ignored).
enum class DocWorkListOrder { heaviest_first, own_first };
AttnWorkList doc_work_list_ordered(const DocWorkListInputs& in, DocWorkListOrder order,
                                   const DocWorkListSplit& costs = DocWorkListSplit{});

// Fills list.rows (per task, per 16-row group of its query tile: the least position and greatest document start,
// rows past Nq reading row Nq - 1) and list.keys (per sample and key tile of the list: the least and greatest position
// of its 128 list rows, rows past list_rows reading the last) from the call's positions, for the CUDA kernel's tile
// test (kernels/attn_work_list.h). For a list built by other means (tests); doc_work_list calls it. O(B list_rows +
// tasks x 128).
void doc_work_list_bounds(AttnWorkList& list, const DocWorkListInputs& in);

// "" when `list` is valid for the call and tight, else the first problem, in words: a task or segment out of range
// or out of order, a query tile listed twice (unsplit) or its parts inconsistent (the same parts count on every part,
// each part 0 .. parts - 1 once, the merge slots [s0, s0 + parts) in part order, the list's slots dense and
// list.merge_slots of them, each part's tiles after the previous part's), a visible (query, key) pair that no segment
// covers or two cover, a listed key tile that holds no key visible to its task's rows, or a row bound or key range
// other than the positions' (recomputed row by row). Brute force over every (query, key) pair: O(B Nq list_rows), for tests
// and checks, not for a step.
std::string doc_work_list_problem(const AttnWorkList& list, const DocWorkListInputs& in);

// The backward's list (AttnBwdWorkList, kernels/attn_work_list.h) for the call: doc_work_list's list mirrored
// (doc_bwd_work_list_mirror), so that it is exact in the same sense: a key tile's segments list a query tile iff one of
// its rows sees one of the tile's keys.
// own_b_row: see doc_bwd_work_list_mirror.
AttnBwdWorkList doc_bwd_work_list(const DocWorkListInputs& in, int64_t own_b_row = -1);

// The mirror of a valid forward list `fwd` of the call: every (query tile, key tile) pair of its segments becomes a
// query tile of the key tile's task, the query tiles of a task sorted and merged into segments of consecutive tiles
// (source: the forward segment's); every key tile of the call gets a task, one that no query sees with no segment.
// Order: own key tiles with segments, heaviest first (most query tiles; ties by sample, then k_row), then gathered ones
// likewise, then the tasks with no segment (by sample, then k_row). With own_b_row >= 0 (a multiple of 128, at most
// attn_second_kv_row(Nk)) the own tiles from that key row on (the own call's part B, parallel/cp/gather_backward.h,
// to run under the dK / dV return) come after the gathered ones instead, heaviest first, before the empty tasks; -1:
// no part B. Refuses (names the task) a forward list that
// names a tile outside the call, a pair twice, or one key tile under two sources. O(pairs + key tiles log key
// tiles): under 1 ms for a 16K-row rank at cp 8 with 6 x 16K gathered rows, its rows in random local order.
AttnBwdWorkList doc_bwd_work_list_mirror(const AttnWorkList& fwd, const DocWorkListInputs& in, int64_t own_b_row = -1);

// "" when the backward `list` is valid for the call and tight, else the first problem, in words: a task or segment
// out of range or of the wrong source, a key tile with no task or two, segments out of order or repeating a query
// tile, a visible (query, key) pair whose query tile its key tile's task does not list, or a listed query tile with
// no row seeing a key of the tile. Brute force over every (query, key) pair: O(B Nq list_rows), for tests and checks.
// The order is not checked (doc_bwd_work_list_mirror states it; the tests check it).
std::string doc_bwd_work_list_problem(const AttnBwdWorkList& list, const DocWorkListInputs& in);

}  // namespace rt
