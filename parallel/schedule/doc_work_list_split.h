// The forward work list's splits (kernels/attn_work_list.h "Splits"; issue 46, bench/NOTES.md "Packed documents at
// cp = 8, one persistent launch per rank and direction": "Split merge" and "Order"): so that one long query tile does
// not run alone in the last wave of the list kernel, a task whose cost stands out is cut at key-tile boundaries into
// parts whose states are merged in part order. Pure host functions; doc_work_list (doc_work_list.h) applies them when
// DocWorkListSplit::on.
//
// The time model (what the builder's order already ranks by, the key tiles of a task, with the fixed cost of a task
// that gather_kernel_time_model (parallel/schedule/ring_time_model.h) fits): one (task, head) unit of n key tiles
// costs task_tiles + n key-tile times, task_tiles = query_tile_us / full_us of the gather forward's fit (two 64-row
// query tiles against two 64 x 128 tiles per 128-key tile: 4.5 tiles at d = 128); a part of a split task costs
// part_tiles more (its state store and its share of the merge's reads: about one tile's K and V bytes each; a guess,
// not fitted).
//
// The rule (doc_work_list_split_parts): the list kernel runs the units in windows of head_window heads, each window
// task-major in the list's order (heaviest first) with its heads fastest, one CTA per SM taking the next unit as it
// frees (attn_fwd_work_list.cuh). Simulate that dispatch on `ctas` slots (doc_work_list_makespan) and compare the
// makespan with the mean CTA load, H x (sum of the tasks' costs) / ctas (what a perfect balance reaches). Within
// tolerance: no split. Otherwise lower a threshold from the heaviest task's cost by 15% a step; at each, every task
// costing more is cut into the fewest parts (at least min_part_tiles key tiles each, at most max_parts) whose costs
// reach the threshold, the list is reordered heaviest first and simulated; keep the candidate with the least makespan,
// stop at the first within tolerance of its own mean load, or when the parts would need more than max_slots merge
// slots. Why the mean CTA load and not a fixed fraction of it: the units of the last window start once the earlier
// windows' work is spread over the SMs, about L - (that window's work) / ctas into the call, so a unit costing c ends
// near L + c - W_window / ctas: whether a task makes the last wave depends on the window's share of the work, which
// the simulation has and a fixed threshold does not. A split adds part_tiles + task_tiles per extra part and head to
// the total, which the simulation charges too, so it splits only where the tail it removes is larger.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/attn_work_list.h"

namespace rt {

struct DocWorkListSplit {
  bool on = false;              // false: every task unsplit (the default of doc_work_list and of the gather path)
  int64_t heads = 16;           // H: the units of a task
  int64_t ctas = 132;           // CTAs running at once: the list kernel runs one per SM (an H200 has 132)
  int64_t head_window = 1;      // heads per window of the kernel's unit order (list_head_window; 1: head by head)
  double task_tiles = 4.53;     // a unit's fixed cost in key-tile times (doc_work_list_split_for: from the fit)
  double part_tiles = 1.0;      // a part's extra cost in key-tile times (state store, merge reads)
  int64_t min_part_tiles = 8;   // key tiles per part at least
  int64_t max_parts = kAttnWorkMaxParts;
  int64_t max_slots = 64;       // merge slots at most: the CUDA scratch is slots x H x 128 x (D + 2) f32 (66.5 KiB a
                                // slot and head at D = 128: 64 slots of 16 heads are 68 MiB)
  double tolerance = 0.03;      // a makespan within 3% of the mean CTA load needs no (more) splitting
  int64_t force_parts = 0;      // tests: > 0 cuts every task into min(force_parts, its tiles / min_part_tiles,
                                // max_parts) parts (those with fewer than 2 stay whole) while max_slots allows,
                                // without the simulation
};

// On, for H heads of head dim head_dim on `ctas` SMs, with task_tiles from gather_kernel_time_model(false, head_dim).
DocWorkListSplit doc_work_list_split_for(int64_t heads, int64_t head_dim, int64_t ctas, int64_t head_window = 1);

// RT_ATTN_WORK_LIST_SPLIT for benches and callers that opt in: unset, "" or "0" off (DocWorkListSplit{}); "1"
// doc_work_list_split_for(heads, head_dim, ctas, head_window); any other value is refused naming both.
DocWorkListSplit doc_work_list_split_from_env(int64_t heads, int64_t head_dim, int64_t ctas, int64_t head_window);

// The cost of one unit of a task of `tiles` key tiles (parts 1) or of one part of `tiles` key tiles (parts > 1), in
// key-tile times.
double doc_work_list_unit_cost(int64_t tiles, bool part, const DocWorkListSplit& s);

// The simulated makespan of a list whose tasks cost `costs` (per unit, in the list's order): units in windows of
// head_window of `heads` heads, each window task-major with its heads fastest, each taken by the first of `ctas` slots
// to free. In the costs' units.
double doc_work_list_makespan(const std::vector<double>& costs, int64_t heads, int64_t head_window, int64_t ctas);

// The rule above: the parts of each task (1: whole) of a list whose tasks have `tiles` key tiles each, in the list's
// order (heaviest first). All 1 when !s.on.
std::vector<int> doc_work_list_split_parts(const std::vector<int64_t>& tiles, const DocWorkListSplit& s);

// `list` (unsplit, in doc_work_list's order) with task i cut into parts[i] parts: its key tiles in order, in parts of
// floor or ceil(tiles / parts) tiles (the longer ones first), each part's segments the runs of consecutive tiles of
// one source. Then every task ordered by doc_work_list_unit_cost, heaviest first (ties: sample, q_row, part); a split
// tile's parts get the merge slots [s0, s0 + parts), s0 numbered densely in the order the tiles' first parts appear.
// Each part keeps its task's row bounds; the key ranges are the list's.
AttnWorkList doc_work_list_apply_splits(const AttnWorkList& list, const std::vector<int>& parts,
                                        const DocWorkListSplit& s);

// The own-first order (issue 46, bench/NOTES.md "ready flags": a list launched before its gathered rows land, under
// ready flags, kernels/attn_ready_flags.h): every unit of own work before any unit that reads a gathered tile, so that
// no unit waiting for the exchange holds an SM while own work is still queued. `list` is unsplit (doc_work_list's);
// a task with both own and gathered tiles is cut into two parts at the source boundary (part 0 its own tiles, part 1
// its gathered tiles: the parts' tiles in part order are the task's, as every split's), merged in part order as any
// split (attn_fwd_work_list_split.cuh; the CPU op likewise). Order: phase 1, the own-only tasks and the own parts,
// heaviest first by doc_work_list_unit_cost (ties: sample, q_row); phase 2, the gathered parts and the gathered-only
// tasks, heaviest first likewise. Merge slots: two per cut task, numbered densely in phase-1 order. The split rule
// (DocWorkListSplit::on) is not applied: s gives the unit costs only (task_tiles, part_tiles). A list with no gathered
// tile comes back in its order (no cut). Note the CUDA kernel's unit order is window-major (attn_fwd_work_list.cuh):
// the own-first order holds across the whole launch only when its head window is every head
// (AttnVariantOverride::fwd_doc_l2_kb large enough); inside each window otherwise.
AttnWorkList doc_work_list_own_first(const AttnWorkList& list, const DocWorkListSplit& s);

// The index of the first task of `list` that names a gathered tile (source >= 0), and whether every task from there
// on names only gathered tiles: the own-first property (tasks.size() when none names one).
struct DocWorkListPhases {
  size_t first_gathered = 0;  // the first task with a gathered segment
  bool own_first = true;      // no task from first_gathered on has an own segment
};
DocWorkListPhases doc_work_list_phases(const AttnWorkList& list);

}  // namespace rt
