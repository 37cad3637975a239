// A document-masked attention call's work list (issue 46, bench/NOTES.md "Packed documents at cp = 8, one persistent
// launch per rank and direction"): which key tiles each 128-row query tile visits, in which order the tiles run,
// built once per step on the host and read by every layer's forward (and later backward) instead of the per-call
// set-up kernels and the per-CTA live-tile scan.
//
// The call is attn_fwd_whole_two_kv's (kernels/op_list.inc): q (B,Nq,H,D), one or two key sources as one key list
// (k's rows [0, Nk), the gap up to attn_second_kv_row(Nk), then k2's rows; with one source the list is k's rows),
// the document mask only (mask.docs; no causal, no row ranges). A key tile is 128 rows of that list: tile t holds list
// rows [128 t, 128 t + 128). A task is one query tile (rows [q_row, q_row + 128) of sample `sample`, clipped at Nq)
// and the key tiles it visits, as segments of consecutive tiles; every head runs every task (the kernel's units are
// task x head). Within a task the segments ascend and do not overlap, own keys (source -1) before gathered ones.
// A list is valid for a call when every visible (query, key) pair of the call lies in exactly one segment of exactly
// one task of its query tile; a tile it leaves out must hold no key visible to any row of the task (it would be fully
// masked). Rows of a query tile with no visible key get out = 0 and lse = -inf, as in every attention call.
//
// The list also carries what the CUDA kernel's tile test would otherwise compute per call (bench/NOTES.md "The work
// list's bounds in the list"): per task, per 16-row group of its query tile, the least position and greatest document
// start (AttnRowBounds); per sample and key tile of the list, the least and greatest position of its 128 list rows
// (AttnKeyRange). Both are functions of the call's positions only: doc_work_list_bounds (parallel/schedule/
// doc_work_list.h) fills them for any list.
//
// Splits (the split merge, bench/NOTES.md "Split merge"; the forward only): a query tile's key tiles may be cut at
// tile boundaries into `parts` (2 .. kAttnWorkMaxParts) part tasks of the same sample and q_row: part p (0 .. parts - 1)
// holds the p-th contiguous run of the tile's key tiles as its segments, so the parts' segments in part order are the
// unsplit task's. Each part has a merge slot: a split tile's parts take the slots [s0, s0 + parts), part p slot
// s0 + p, and a list's slots are numbered densely from 0 (AttnWorkList::merge_slots of them; the device words carry
// them in the tasks only). An unsplit task is part 0 of 1 with merge_slot -1. Valid as above: every visible (query,
// key) pair in exactly one segment of exactly one part of its query tile. An op runs each part from a fresh state
// into its unnormalized state (O, m, l per row) and merges the parts in part order (attn_state_merge's math) before
// the finalize, so the result does not depend on which part finishes first; it is within rounding of the unsplit
// list's, not bitwise equal. doc_work_list (parallel/schedule/doc_work_list.h) splits only when asked.
//
// On the device the list is one i32 tensor: attn_work_list_words() below, uploaded once per step.
//
// The backward's list (AttnBwdWorkList, the second kind) is the forward's transposed, for bwd v5's key-tile-major
// units: a task is one 128-row key tile of the same key list (list rows [k_row, k_row + 128) of sample `sample`,
// clipped at its source's end; never a gap row) and the query tiles that see it, as segments of consecutive 128-row
// query tiles (ascending, not overlapping). A segment's `source` is the source of the keys its (query, key) pairs
// read, as in the forward: the task's key tile's (-1 own, s >= 0 gathered behind ready flag s), the same in every
// segment of a task. A backward list is valid for a call when every key tile of the call has exactly one task and
// its segments list exactly the query tiles holding a row that sees a key of the tile; a key tile no query sees has a
// task with no segment (segs = 0), whose dK / dV are stored as zero. Order: own key tiles with segments, heaviest
// first (most query tiles), then gathered ones likewise, then (optionally) the own tiles of the own call's part B,
// then the tasks with no segment; doc_bwd_work_list (parallel/schedule/doc_work_list.h) builds it. Splits (parts,
// merge_slot) are reserved as in the forward.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_shapes.h"
#include "kernels/attn_ready_flags.h"

namespace rt {

constexpr int64_t kAttnWorkTileRows = 128;  // query rows of a task and key rows of a tile
constexpr int kAttnWorkMaxParts = 8;        // parts of one split query tile at most

struct AttnKeySeg {     // 8 bytes
  int32_t first_tile;   // the first key tile (list rows [128 first_tile, ...))
  int16_t tiles;        // consecutive tiles, >= 1
  int8_t source;        // -1: the call's own keys (k, v); s >= 0: gathered rows (k2, v2) behind ready flag s (0: all
                        // gathered rows land together, as one exchange delivers them; per-peer flags later)
  int8_t spare;         // 0
};

struct AttnWorkTask {   // 16 bytes
  int32_t q_row;        // the query tile's first row (a multiple of 128)
  int16_t sample;       // b
  int8_t part, parts;   // part `part` of `parts` of the tile's key tiles (0 of 1: unsplit; parts <= 8)
  int32_t first_seg;    // its segments: segs[first_seg, first_seg + segs)
  int16_t segs;         // >= 1
  int16_t merge_slot;   // -1: unsplit; else the part's state slot (the tile's first slot + part)
};

// A task's query tile in groups of 16 rows (a consumer warp's rows in the CUDA kernel).
constexpr int64_t kAttnWorkRowGroupRows = 16;
constexpr int64_t kAttnWorkRowGroups = kAttnWorkTileRows / kAttnWorkRowGroupRows;  // 8

struct AttnRowBounds {  // 16 bytes: one 16-row group of a task's query tile (rows past Nq read row Nq - 1)
  int64_t pos_lo;       // the least query position of the group's rows
  int64_t doc_hi;       // the greatest document start of the group's rows
};

struct AttnKeyRange {   // 16 bytes: one 128-row key tile of a sample's key list
  int64_t lo, hi;       // the least and greatest position of its list rows [128 t, 128 t + 128), rows past the list's
                        // end reading its last row; the gap rows after an own partial tile count (the caller fills
                        // them with a position no query sees, as the kernels' element masks read them too)
};

struct AttnWorkList {
  std::vector<AttnWorkTask> tasks;  // in the order the kernel takes them (heaviest first)
  std::vector<AttnKeySeg> segs;
  std::vector<AttnRowBounds> rows;  // (tasks, kAttnWorkRowGroups): task n's groups at [8 n, 8 n + 8)
  std::vector<AttnKeyRange> keys;   // (B, key tiles of the list): sample b's tile t at b * tiles + t
  int32_t merge_slots = 0;          // the split parts' state slots [0, merge_slots) (0: no split task)
  int64_t key_tiles() const;        // sum of tiles over every segment (one head's key-tile visits)
};

// The backward's task and segment: the forward's layouts (16 and 8 bytes, the same fields in the same places) under
// the backward's names.
struct AttnQuerySeg {   // 8 bytes
  int32_t first_tile;   // the first query tile (query rows [128 first_tile, ...))
  int16_t tiles;        // consecutive query tiles, >= 1
  int8_t source;        // the task's key tile's source: -1 own (k, v), s >= 0 gathered (k2, v2) behind ready flag s
  int8_t spare;         // 0
};

struct AttnBwdTask {    // 16 bytes
  int32_t k_row;        // the key tile's first row in the key list (a multiple of 128; >= attn_second_kv_row(Nk)
                        // for a gathered tile, whose rows in k2 start at k_row - attn_second_kv_row(Nk))
  int16_t sample;       // b
  int8_t part, parts;   // reserved for splits: 0 of 1
  int32_t first_seg;    // its segments: segs[first_seg, first_seg + segs)
  int16_t segs;         // >= 0: 0 for a key tile no query sees (dK, dV stored as zero)
  int16_t merge_slot;   // -1: unsplit
};

struct AttnBwdWorkList {
  std::vector<AttnBwdTask> tasks;  // one per key tile of the call, in the order the kernel takes them
  std::vector<AttnQuerySeg> segs;
  int64_t query_tiles() const;     // sum of tiles over every segment (one head's (query tile, key tile) visits)
};

// The device forms. Forward: words[0] = tasks T, words[1] = segments S, words[2] = kAttnFwdWorkListTag, words[3] =
// key ranges K (B x key tiles, or 0 for a list without tasks), then the tasks (4 i32 each, the struct's bytes), the
// row bounds (32 i32 per task), the key ranges (4 i32 each) and the segments (2 i32 each): (4 + 36 T + 4 K + 2 S) i32,
// every section 16-byte aligned but the segments'. Backward: words[0] = tasks, words[1] = segments,
// words[2] = kAttnBwdWorkListTag, words[3] = 0, then the tasks (4 i32 each, 16-byte aligned) and the segments
// (2 i32 each): (4 + 4 T + 2 S) i32. The tags tell the two kinds apart.
constexpr int32_t kAttnFwdWorkListTag = 0x46774c32;  // "FwL2"
constexpr int32_t kAttnBwdWorkListTag = 0x42774c31;  // "BwL1"
enum class AttnWorkListKind { forward, backward };
std::vector<int32_t> attn_work_list_words(const AttnWorkList& list);
std::vector<int32_t> attn_work_list_words(const AttnBwdWorkList& list);
// Which kind the words hold (by the tag and the length; refuses words that are neither, naming the problem).
AttnWorkListKind attn_work_list_kind(const int32_t* words, int64_t n_words);
// The inverses, for the CPU ops and the tests: check the kind and the counts against the words' length (each refuses
// the other kind's words, naming the builder to use). The forward's merge_slots is the tasks' greatest merge_slot + 1.
AttnWorkList attn_work_list_from_words(const int32_t* words, int64_t n_words);
AttnBwdWorkList attn_bwd_work_list_from_words(const int32_t* words, int64_t n_words);

// attn_fwd_whole_two_kv (kernels/op_list.inc) over a work list: the same q, k, v, k2, v2, scratch, document mask,
// out (B,Nq,H,D) and lse (B,H,Nq), plus `list` (n_words) i32 on q's device (attn_work_list_words) and `tasks`, its task
// count (words[0]; the host knows it from building the list, and the CUDA kernel's grid is exactly tasks x H units, so
// it never reads the list back; both backends refuse a count other than the words'). k2 / v2 may be
// undefined or hold 0 rows: one source (the list then names no gathered tile). Every listed (task, head) runs an
// online softmax over its segments' key tiles in order; rows no task covers, and rows that see no key of their tiles,
// get out 0 and lse -inf. The list must be valid for the call (above: doc_work_list builds one,
// parallel/schedule/doc_work_list.h); a key the list leaves out is not read. Declared here, not in
// kernels/op_list.inc, and dispatched in kernels/attn_work_list.cpp: kernels/cpu/attention/attn_fwd_work_list.cpp
// and kernels/cuda/attention/attn_fwd_work_list.cu.
// attn_fwd_work_list's argument checks, shared by both backends (each adds its dtype and device checks): those of
// attn_two_kv_dims (kernels/attention_shapes.h), except that k2 and v2 may be undefined (one source: list_rows = Nk,
// docs.k_stride >= Nk), and `list` must be a 1-D i32 tensor on q's device of at least 2 words.
inline AttnDims attn_work_list_dims(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2,
                                    const Tensor& v2, const AttnMask& mask, const Tensor& list, int64_t& list_rows,
                                    const char* op) {
  AttnDims d;
  if (k2.defined() || v2.defined()) {
    d = attn_two_kv_dims(q, k, v, k2, v2, mask, list_rows, op);
  } else {
    d = attn_shape_dims(q, k, v, op);
    RT_CHECK(mask.docs.on() && !mask.causal && mask.q_begin == 0 && mask.q_end == -1 && mask.k_begin == 0 &&
                 mask.k_end == -1,
             op << ": takes the document mask over every query and key row (no causal mask, no row ranges)");
    list_rows = d.Nk;
    RT_CHECK(mask.docs.k_stride >= list_rows,
             op << ": docs.k_stride = " << mask.docs.k_stride << " is shorter than k's " << d.Nk << " rows");
  }
  RT_CHECK(list.defined() && list.ndim == 1 && list.shape[0] >= 2,
           op << ": list must be the work list's words as a 1-D i32 tensor (attn_work_list_words), got "
              << (list.defined() ? list.shape_str() : std::string("undefined")));
  check_dtype(list, DType::i32, op, "list");
  RT_CHECK(list.device == q.device,
           op << ": list is on " << list.device.str() << " but q is on " << q.device.str() << "; upload it there");
  return d;
}

void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse);

// The split merge's scratch, for a list with split tasks (AttnWorkList::merge_slots > 0). `slots` is the list's
// merge_slots (the host knows it from building the list, as it knows the task count; both backends refuse a list
// whose tasks name another count). On CUDA, state and count are required (on q's device; at least `slots` slots):
//   state (>= slots, H, 128, D + 2) f32: the part with merge slot s, head h, query row q_row + r of its tile at
//          [s, h, r]: its unnormalized O (D), m (log2 units, as AttnState's) and l;
//   count (>= slots, H, 8) i32: per split tile's first slot, head and 16-row group, how many of its parts have stored
//          their state; zero when allocated (memset once), and every call leaves it zero (the part that merges resets
//          it), so calls need no memset.
// One call at a time per scratch (calls on one stream; two streams need two scratches). The CPU op keeps its parts'
// states in temporaries and reads `slots` only (state and count may be undefined).
struct AttnSplitScratch {
  Tensor state;       // (slots, H, 128, D + 2) f32
  Tensor count;       // (slots, H, 8) i32, zero between calls
  int64_t slots = 0;  // the list's merge slots
};
// The shapes above for `slots` slots of H heads, head dim D.
inline std::vector<int64_t> attn_split_state_shape(int64_t slots, int64_t H, int64_t D) {
  return {slots, H, kAttnWorkTileRows, D + 2};
}
inline std::vector<int64_t> attn_split_count_shape(int64_t slots, int64_t H) {
  return {slots, H, kAttnWorkRowGroups};
}

// The heads per window in which attn_fwd_work_list's CUDA kernel runs its units (the L2 rule of its launcher, for a
// call of H query and Hkv K/V heads over key_rows key rows of B samples at head dim D; the current variant override's
// budget), so that the split rule (parallel/schedule/doc_work_list_split.h) simulates the kernel's order; 1 in a
// build without CUDA.
int64_t attn_fwd_work_list_head_window(int64_t H, int64_t Hkv, int64_t key_rows, int64_t D, int64_t B);

// attn_fwd_work_list over a list that may hold split tasks (the overload above is this one with split.slots = 0: an
// unsplit list). A list with splits and split.slots = 0 is refused (the CPU op reads the list and names the fix; the
// CUDA op does not read the words on the host: its kernel stops on a split task, or with RT_ATTN_WORK_LIST_CHECK=1 the
// host check names it).
void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse, const AttnSplitScratch& split);

// attn_fwd_work_list with ready flags (kernels/attn_ready_flags.h): the same call, launched before the gathered rows
// (k2, v2) have landed; a unit reading a gathered tile waits for ready[s] == ready.epoch of its sources first, under a
// watchdog of ready.timeout_s whose fault the caller reads with attn_ready_fault_check. ready.on() false: the overload
// above. On CUDA only; the CPU op ignores the flags (the caller's wait has ordered the rows before the call).
void attn_fwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        AttnState& scratch, const AttnMask& mask, const Tensor& list, int64_t tasks, Tensor out,
                        Tensor lse, const AttnSplitScratch& split, const AttnReadyFlags& ready);

// attn_bwd_block_fresh_two_kv (kernels/op_list.inc) over a backward work list (AttnBwdWorkList, words from
// attn_work_list_words): the same q, k, v, k2, v2, dout, lse, delta, document mask; dq_acc (B,Nq,H,D) f32 accumulates;
// dk, dv (B,Nk,Hkv,D) and dk2, dv2 (B,Nk2,Hkv,D) f32 are overwritten with their sources' gradients (zero for a key
// tile no query sees). k2, v2, dk2, dv2 may be undefined or hold 0 rows: one source (the list then names no gathered
// tile). Argument checks: attn_work_list_dims. Per task, every head runs its key tile against its segments' query
// tiles in order. The list must be valid for the call (doc_bwd_work_list builds one); a query tile the list leaves
// out of a task is not read for it. kernels/cpu/attention/attn_bwd_work_list.cpp runs it on the host (bit for bit
// attn_bwd_block_fresh_two_kv's results: it visits the tasks in key order, see there); kernels/cuda/attention/
// attn_bwd_work_list.cu on Hopper (bwd v5's list mode, one launch, the tasks in the list's order: dK / dV bitwise
// attn_bwd_block_fresh_two_kv's, dq_acc within fp32 rounding; it writes dK / dV only through their tile's task, so its
// list must name every key tile; ask attn_bwd_work_list_runs, kernels/attn_bwd_work_list_runs.h, before building one).
// Neither waits on the segments' ready flags (source s >= 0): the caller orders the gathered rows before the call.
void attn_bwd_work_list(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k2, const Tensor& v2,
                        const Tensor& dout, const Tensor& lse, const Tensor& delta, Tensor dq_acc, Tensor dk,
                        Tensor dv, Tensor dk2, Tensor dv2, const AttnMask& mask, const Tensor& list);

}  // namespace rt
