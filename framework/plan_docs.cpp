// `ringtrain plan --doc-lengths FILE`: the attention work of packed documents with that length mix, at the
// config's seq_len and cp: expected visible (query, key) pairs per sample (the mean over seeded windows of T
// tokens into the stream of documents), the attention FLOPs per step they cost, and the ring imbalance
// (parallel/doc_balance.h) of each layout.
#include <algorithm>
#include <random>

#include "framework/plan_docs.h"
#include "parallel/doc_balance.h"

namespace rt {

DocLengthPlan doc_length_plan(const Config& config, const std::string& path, int windows) {
  const std::vector<int64_t> lengths = read_doc_lengths(path);
  const int64_t T = config.data.seq_len;
  const int cp = config.parallel.cp;
  DocLengthPlan plan;
  plan.path = path;
  plan.windows = windows;
  const Layout layouts[] = {Layout::contiguous, Layout::zigzag, Layout::striped};
  for (int l = 0; l < 4; ++l) plan.imbalance[l] = 0;
  for (int k = 0; k < windows; ++k) {
    std::mt19937_64 rng(1000 + uint64_t(k));
    const size_t doc = size_t(rng() % lengths.size());
    const std::vector<int64_t> starts = doc_starts_from_lengths(lengths, T, doc, int64_t(rng() % uint64_t(lengths[doc])));
    double pairs = 0;
    for (int64_t p = 0; p < T; ++p) pairs += double(p - starts[size_t(p)] + 1);
    plan.pairs_per_sample += pairs / windows;
    for (int l = 0; l < 4; ++l) {
      const bool zigzag_ok = T % (2 * int64_t(cp)) == 0;
      if (l == 1 && !zigzag_ok) continue;
      const std::vector<int64_t> order = l < 3 ? layout_ring_order(layouts[l], T, cp) : balanced_ring_order(starts, cp);
      plan.imbalance[l] += ring_imbalance(ring_pair_counts(starts, order, cp), cp) / windows;
    }
  }
  // Training attention FLOPs: forward 4*d_model per pair (QK^T and PV over all heads), backward twice that.
  plan.attention_flops_per_step =
      12.0 * config.model.n_layer * double(config.model.d_model) * plan.pairs_per_sample * config.train.batch_size;
  plan.causal_pairs_per_sample = double(T) * double(T + 1) / 2;
  return plan;
}

}  // namespace rt
