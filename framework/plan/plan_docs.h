// `ringtrain plan --doc-lengths FILE` (framework/plan/plan_docs.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "parallel/schedule/a2a_choice.h"
#include "parallel/schedule/cp_scheme.h"

namespace rt {

struct DocLengthPlan {
  std::string path;
  int windows = 0;                        // seeded sample windows averaged over
  double pairs_per_sample = 0;            // visible (query, key) pairs of one T-token sample, mean
  double causal_pairs_per_sample = 0;     // T (T + 1) / 2: the same sample as one document
  double attention_flops_per_step = 0;    // 12 * L * d_model * pairs * batch (forward 4 d, backward 8 d per pair)
  double imbalance[4] = {0, 0, 0, 0};     // contiguous, zigzag (0 when seq_len % 2cp != 0), striped, balanced
  // The kernels' tile cost (parallel/schedule/ring_tile_cost.h), mean over the windows, same layout order:
  double work_efficiency[4] = {0, 0, 0, 0};  // one whole call's tiles / the sum over (rank, step) calls' tiles
  double ring_efficiency[4] = {0, 0, 0, 0};  // one whole call's tiles / (cp x the critical path's tiles)
  std::string balanced_picks;                // balanced's candidates chosen, with how many windows each
  // Per window, what the loader runs it with under layout balanced (schedule_batch): the order's name and the scheme.
  std::vector<std::string> window_labels;
  std::vector<CpScheme> window_schemes;
  double balanced_ms = 0;                    // host time balanced takes per sample (the loader pays it), mean
  // Each candidate of balanced (parallel/schedule/doc_balance.h) with the time model's prediction (parallel/schedule/ring_time_model.h),
  // mean over the windows: efficiency = ideal (one whole call / cp) / predicted critical path, communication
  // included; bytes per layer (all ranks, fwd + bwd) against the plain ring's; windows it was picked in.
  // gather_*: the same assignment run by the gather scheme (parallel.cp_scheme, parallel/schedule/cp_scheme.h); gather_wins:
  // windows where it is predicted faster than the ring (what cp_scheme: auto would run).
  struct Candidate {
    std::string name;
    double eff_fwd = 0, eff_bwd = 0, comm_share = 0, bytes = 0, ring_bytes = 0;
    int picked = 0;
    double gather_eff_fwd = 0, gather_eff_bwd = 0, gather_comm_share = 0, gather_bytes = 0;
    int gather_wins = 0;
  };
  std::vector<Candidate> candidates;
  // parallel.cp_a2a: each u's prediction over the same windows and the pick (framework/plan/a2a_auto.h).
  A2aChoice a2a;
};

// The seeded sample windows doc_length_plan averages over: each window's document start per position (T each).
std::vector<std::vector<int64_t>> doc_length_windows(const std::vector<int64_t>& lengths, int64_t T, int windows);

constexpr int kDocLengthWindows = 8;  // seeded windows per --doc-lengths plan
DocLengthPlan doc_length_plan(const Config& config, const std::string& path, int windows = kDocLengthWindows);

}  // namespace rt
