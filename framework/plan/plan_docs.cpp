// `ringtrain plan --doc-lengths FILE`: the attention work of packed documents with that length mix, at the
// config's seq_len and cp: expected visible (query, key) pairs per sample (the mean over seeded windows of T
// tokens into the stream of documents), the attention FLOPs per step they cost, and per layout the ring imbalance
// (parallel/schedule/doc_balance.h) and the kernels' tile efficiency (parallel/schedule/ring_tile_cost.h), with
// balanced's picks: the loader's own (schedule_batch, parallel/schedule/batch_schedule.h).
#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "framework/data/data.h"
#include "framework/plan/a2a_auto.h"
#include "framework/plan/plan_docs.h"
#include "parallel/schedule/batch_schedule.h"
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
  const int cp = config.parallel.ring();  // the layouts are over the ring (cp / cp_a2a ranks), as the loader's
  DocLengthPlan plan;
  plan.path = path;
  plan.windows = windows;
  // balanced's pick is the loader's: the same function (schedule_batch) with the same rule, so the shape per rank
  // is the loader's too (the query and KV heads of a tp rank after the all-to-all's split).
  const ScheduleRule rule = schedule_rule(config, Layout::balanced, cp);
  const RingShape& shape = rule.shape;
  const bool with_gather = rule.scheme != CpScheme::ring;
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
        BatchSchedule picked = schedule_batch({starts}, rule);  // a window is a batch of one sample
        plan.balanced_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / windows;
        picks[picked.label] += 1;
        plan.window_labels.push_back(picked.label);
        plan.window_schemes.push_back(picked.scheme);
        // Every candidate the chooser weighed, with the same prediction (the gather candidates join as they do for
        // the loader: with cp_scheme gather or auto).
        const std::vector<RingCandidate> cands = ring_candidates(starts, cp, shape, /*with_orders=*/false, with_gather);
        for (const RingCandidate& cand : cands) {
          auto it = std::find_if(plan.candidates.begin(), plan.candidates.end(),
                                 [&](const DocLengthPlan::Candidate& x) { return x.name == cand.label(); });
          if (it == plan.candidates.end()) {
            plan.candidates.push_back({cand.label()});
            it = plan.candidates.end() - 1;
          }
          const RingTimePrediction& t = cand.time;
          it->eff_fwd += t.efficiency_fwd() / windows, it->eff_bwd += t.efficiency_bwd() / windows;
          it->comm_share += t.comm_share() / windows;
          it->bytes += t.bytes_per_layer / windows, it->ring_bytes += t.ring_bytes_per_layer / windows;
          it->picked += cand.label() == picked.label ? 1 : 0;
          if (cand.gather) continue;  // its own row is the gather's prediction
          const KvGatherPlan gplan = kv_gather_plan_for_spans(document_begins(starts), cand.spans, cp);
          const RingTimePrediction g =
              predict_gather_time(kv_gather_tiles(starts, cand.spans, gplan, cp), gplan,
                                  ring_tile_cost_for_spans(starts, {RingSpan{0, T, 0}}, 1), shape);
          it->gather_eff_fwd += g.efficiency_fwd() / windows, it->gather_eff_bwd += g.efficiency_bwd() / windows;
          it->gather_comm_share += g.comm_share() / windows;
          it->gather_bytes += g.bytes_per_layer / windows;
          it->gather_wins += g.total_us() < t.total_us() * (1 - 1e-12) ? 1 : 0;
        }
        order = std::move(picked.orders[0]);
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
