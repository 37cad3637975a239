// `ringtrain plan --doc-lengths FILE`: the attention work of packed documents with that length mix, at the
// config's seq_len and cp: expected visible (query, key) pairs per sample (the mean over seeded windows of T
// tokens into the stream of documents), the attention FLOPs per step they cost, and per layout the ring imbalance
// (parallel/schedule/doc_balance.h) and the kernels' tile efficiency (parallel/schedule/ring_tile_cost.h), with balanced's picks.
#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "framework/plan/a2a_auto.h"
#include "framework/plan/plan_docs.h"
#include "parallel/schedule/doc_balance.h"
#include "parallel/schedule/gather_plan.h"

namespace rt {

std::vector<std::vector<int64_t>> doc_length_windows(const std::vector<int64_t>& lengths, int64_t T, int windows) {
  std::vector<std::vector<int64_t>> out;
  for (int k = 0; k < windows; ++k) {
    std::mt19937_64 rng(1000 + uint64_t(k));
    const size_t doc = size_t(rng() % lengths.size());
    out.push_back(doc_starts_from_lengths(lengths, T, doc, int64_t(rng() % uint64_t(lengths[doc]))));
  }
  return out;
}

DocLengthPlan doc_length_plan(const Config& config, const std::string& path, int windows) {
  const std::vector<int64_t> lengths = read_doc_lengths(path);
  const int64_t T = config.data.seq_len;
  const int cp = config.parallel.cp;
  DocLengthPlan plan;
  plan.path = path;
  plan.windows = windows;
  RingShape shape;  // per rank, as RingAttention runs it
  shape.heads = config.model.n_head / std::max(1, config.parallel.tp);
  shape.kv_heads = std::max(1, config.model.n_kv_head / std::max(1, config.parallel.tp));
  shape.head_dim = config.model.head_dim();
  shape.dkv_wire_bytes = config.parallel.dkv_wire == "bf16" ? 2 : 4;
  const Layout layouts[] = {Layout::contiguous, Layout::zigzag, Layout::striped};
  std::map<std::string, int> picks;  // balanced's choice -> windows
  const std::vector<std::vector<int64_t>> samples = doc_length_windows(lengths, T, windows);
  plan.a2a = a2a_choice_for(config, samples);
  for (int k = 0; k < windows; ++k) {
    const std::vector<int64_t>& starts = samples[size_t(k)];
    double pairs = 0;
    for (int64_t p = 0; p < T; ++p) pairs += double(p - starts[size_t(p)] + 1);
    plan.pairs_per_sample += pairs / windows;
    const double whole = whole_tile_cost(starts);
    for (int l = 0; l < 4; ++l) {
      const bool zigzag_ok = T % (2 * int64_t(cp)) == 0;
      if (l == 1 && !zigzag_ok) continue;
      std::vector<int64_t> order;
      if (l < 3) {
        order = layout_ring_order(layouts[l], T, cp);
      } else {
        const auto t0 = std::chrono::steady_clock::now();
        // As the loader chooses (framework/data/data.cpp): with cp_scheme gather or auto, the gather candidates
        // (parallel/schedule/doc_balance.h, gatherpack included) join, and the pick is over both (gather: over them alone).
        const std::string& scheme = config.parallel.cp_scheme;
        std::vector<RingCandidate> cands = ring_candidates(starts, cp, shape, true, scheme != "ring");
        size_t best = pick_balanced(cands);
        if (scheme == "gather")
          for (size_t c = 0; c < cands.size(); ++c)
            if (cands[c].gather && (!cands[best].gather || cands[c].time.total_us() < cands[best].time.total_us()))
              best = c;
        plan.balanced_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / windows;
        picks[cands[best].label()] += 1;
        for (size_t c = 0; c < cands.size(); ++c) {
          auto it = std::find_if(plan.candidates.begin(), plan.candidates.end(),
                                 [&](const DocLengthPlan::Candidate& x) { return x.name == cands[c].label(); });
          if (it == plan.candidates.end()) {
            plan.candidates.push_back({cands[c].label()});
            it = plan.candidates.end() - 1;
          }
          const RingTimePrediction& t = cands[c].time;
          it->eff_fwd += t.efficiency_fwd() / windows, it->eff_bwd += t.efficiency_bwd() / windows;
          it->comm_share += t.comm_share() / windows;
          it->bytes += t.bytes_per_layer / windows, it->ring_bytes += t.ring_bytes_per_layer / windows;
          it->picked += c == best ? 1 : 0;
          if (cands[c].gather) continue;  // its own row is the gather's prediction
          const KvGatherPlan gplan = kv_gather_plan_for_spans(document_begins(starts), cands[c].spans, cp);
          const RingTimePrediction g =
              predict_gather_time(kv_gather_tiles(starts, cands[c].spans, gplan, cp), gplan,
                                  ring_tile_cost_for_spans(starts, {RingSpan{0, T, 0}}, 1), shape);
          it->gather_eff_fwd += g.efficiency_fwd() / windows, it->gather_eff_bwd += g.efficiency_bwd() / windows;
          it->gather_comm_share += g.comm_share() / windows;
          it->gather_bytes += g.bytes_per_layer / windows;
          it->gather_wins += g.total_us() < t.total_us() * (1 - 1e-12) ? 1 : 0;
        }
        order = std::move(cands[best].order);
      }
      const std::vector<double> pairs = ring_pair_counts(starts, order, cp);
      const RingTileCost tiles = ring_tile_cost(starts, order, cp, pairs);
      plan.imbalance[l] += ring_imbalance(pairs, cp) / windows;
      plan.work_efficiency[l] += whole / tiles.total / windows;
      plan.ring_efficiency[l] += whole / (cp * tiles.critical) / windows;
    }
  }
  for (const auto& p : picks)
    plan.balanced_picks += (plan.balanced_picks.empty() ? "" : ", ") + p.first + " " + std::to_string(p.second) + "/" +
                           std::to_string(windows);
  // Training attention FLOPs: forward 4*d_model per pair (QK^T and PV over all heads), backward twice that.
  plan.attention_flops_per_step =
      12.0 * config.model.n_layer * double(config.model.d_model) * plan.pairs_per_sample * config.train.batch_size;
  plan.causal_pairs_per_sample = double(T) * double(T + 1) / 2;
  return plan;
}

}  // namespace rt
