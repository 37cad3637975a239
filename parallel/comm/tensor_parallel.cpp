#include "parallel/comm/tensor_parallel.h"

namespace rt {

namespace {
ShardRange even_split(int64_t total, int tp, int tp_rank, const char* what) {
  RT_CHECK(tp >= 1 && 0 <= tp_rank && tp_rank < tp, "tensor parallel: rank " << tp_rank << " out of range for tp = " << tp);
  RT_CHECK(total % tp == 0, what << " " << total << " is not divisible by tp = " << tp
                                 << "; choose parallel.tp that divides it");
  const int64_t per = total / tp;
  return {tp_rank * per, (tp_rank + 1) * per};
}
}  // namespace

HeadPartition partition_heads(int64_t n_head, int64_t n_kv_head, int tp, int tp_rank) {
  RT_CHECK(n_kv_head >= 1 && n_head % n_kv_head == 0,
           "n_head " << n_head << " must be a multiple of n_kv_head " << n_kv_head);
  HeadPartition p;
  p.q_heads = even_split(n_head, tp, tp_rank, "n_head");
  if (n_kv_head >= tp) {
    p.kv_heads = even_split(n_kv_head, tp, tp_rank, "n_kv_head");
  } else {
    RT_CHECK(tp % n_kv_head == 0, "n_kv_head " << n_kv_head << " < tp = " << tp
                                               << " needs tp to be a multiple of n_kv_head so KV heads replicate "
                                                  "evenly; choose tp in multiples of "
                                               << n_kv_head << " or raise n_kv_head");
    const int64_t kv = int64_t(tp_rank) * n_kv_head / tp;
    p.kv_heads = {kv, kv + 1};
    p.kv_replicated = true;
  }
  return p;
}

ShardRange head_rows(ShardRange heads, int64_t head_dim) { return {heads.begin * head_dim, heads.end * head_dim}; }

ShardRange column_parallel_rows(int64_t out_features, int tp, int tp_rank) {
  return even_split(out_features, tp, tp_rank, "out_features of a column-parallel weight");
}

ShardRange row_parallel_cols(int64_t in_features, int tp, int tp_rank) {
  return even_split(in_features, tp, tp_rank, "in_features of a row-parallel weight");
}

void tp_all_reduce(Comm& tp, Tensor t) {
  if (tp.size() > 1) tp.all_reduce_sum(t);
}

}  // namespace rt
