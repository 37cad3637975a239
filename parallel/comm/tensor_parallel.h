// Tensor-parallel helpers (DESIGN.md "Tensor parallel"): which heads and which weight rows/columns a tp
// rank owns, and the all-reduce after row-parallel layers. Linear weights are (out_features, in_features).
//   column-parallel (QKV by head, MLP fc / w1 / w3): rows (out-features) split, no communication.
//   row-parallel (out-proj, MLP proj / w2): columns (in-features) split, partial outputs all-reduced.
#pragma once
#include <cstdint>

#include "kernels/tensor.h"
#include "parallel/comm/comm.h"

namespace rt {

// Half-open index range [begin, end).
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Heads of one tp rank. Requires n_head % tp == 0. KV heads are split when n_kv_head >= tp (then
// n_kv_head % tp == 0); when n_kv_head < tp they are replicated (tp % n_kv_head == 0): rank t holds the
// single KV head t * n_kv_head / tp, the one every one of its query heads reads. Either way local query
// head i reads local KV head i / (q_heads.size() / kv_heads.size()), as the attention kernels expect.
struct HeadPartition {
  ShardRange q_heads;   // global query heads
  ShardRange kv_heads;  // global KV heads
  bool kv_replicated = false;
};
HeadPartition partition_heads(int64_t n_head, int64_t n_kv_head, int tp, int tp_rank);

// Rows of a weight (out_features, in_features) split by heads: rows [heads.begin*D, heads.end*D).
ShardRange head_rows(ShardRange heads, int64_t head_dim);
// Column-parallel: this rank's rows (out-features) of a (out_features, in_features) weight.
ShardRange column_parallel_rows(int64_t out_features, int tp, int tp_rank);
// Row-parallel: this rank's columns (in-features) of a (out_features, in_features) weight.
ShardRange row_parallel_cols(int64_t in_features, int tp, int tp_rank);

// Sums the partial outputs of a row-parallel layer over the tp group, in place (no-op for tp = 1).
void tp_all_reduce(Comm& tp, Tensor t);

}  // namespace rt
