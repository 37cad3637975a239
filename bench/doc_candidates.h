// The chooser's candidates by label, for the benchmarks (host only; bench_doc_ring_steps --candidate /
// --list-candidates, bench_doc_imbalance --list-candidates / --gather-features). The candidates are exactly those
// `--scheme auto` chooses among: ring_candidates with the gather scheme's, and pick_balanced's pick
// (balanced_ring_choice, parallel/schedule/doc_balance.h); nothing here ranks them again.
//   chooser_candidates      ring_candidates(..., with_gather = true), orders left empty (built for the one run)
//   find_candidate          the candidate whose RingCandidate::label() is the given label, else an error naming them
//   candidate_same_as       per candidate, the first earlier one of the same scheme and spans (the same calls: a
//                           second measurement of it measures nothing new), or -1
//   print_candidate_listing one text line per candidate and, with a path, the same as one JSON object
//   join_ints               "a,b,c"
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "parallel/schedule/doc_balance.h"

namespace rt::bench {

inline std::string join_ints(const std::vector<int64_t>& xs) {
  std::string s;
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? "," : "") + std::to_string(xs[i]);
  return s;
}

inline std::vector<RingCandidate> chooser_candidates(const std::vector<int64_t>& starts, int cp,
                                                     const RingShape& shape) {
  return ring_candidates(starts, cp, shape, /*with_orders=*/false, /*with_gather=*/true);
}

inline size_t find_candidate(const std::vector<RingCandidate>& cands, const std::string& label) {
  std::string valid;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (cands[i].label() == label) return i;
    valid += (i ? ", " : "") + cands[i].label();
  }
  RT_CHECK(false, "no candidate '" << label << "' for this sample; its candidates are: " << valid);
  return 0;
}

inline std::vector<int> candidate_same_as(const std::vector<RingCandidate>& cands) {
  std::vector<int> same(cands.size(), -1);  // (candidates)
  for (size_t i = 0; i < cands.size(); ++i)
    for (size_t j = 0; j < i && same[i] < 0; ++j)
      if (same[j] < 0 && cands[j].gather == cands[i].gather && cands[j].spans == cands[i].spans) same[i] = int(j);
  return same;
}

// One line per candidate on stdout: "candidate: LABEL scheme S predicted fwd F us bwd B us total T us[ same as
// L][ <- pick]", the pick being pick_balanced's (what --scheme auto runs; checked against balanced_ring_choice).
// json_path (may be empty): {"kind":"doc_ring_candidates", N, cp, H, kv_heads, d, pick, candidates: [{label, name,
// scheme, predicted_fwd_us, predicted_bwd_us, predicted_fwd_compute_us, predicted_bwd_compute_us, same_as, pick}]}.
inline void print_candidate_listing(const std::vector<int64_t>& starts, int cp, const RingShape& shape,
                                    const std::string& json_path) {
  const std::vector<RingCandidate> cands = chooser_candidates(starts, cp, shape);
  const size_t pick = pick_balanced(cands);
  const std::string auto_label = balanced_ring_choice(starts, cp, shape, /*with_gather=*/true).label;
  RT_CHECK(cands[pick].label() == auto_label, "the listing's pick " << cands[pick].label()
                                                                    << " is not --scheme auto's " << auto_label);
  const std::vector<int> same = candidate_same_as(cands);
  FILE* json = nullptr;
  if (!json_path.empty()) {
    json = std::fopen(json_path.c_str(), "w");
    RT_CHECK(json != nullptr, "cannot write --json " << json_path);
    std::fprintf(json, "{\"kind\":\"doc_ring_candidates\",\"N\":%lld,\"cp\":%d,\"H\":%lld,\"kv_heads\":%lld,"
                       "\"d\":%lld,\"pick\":\"%s\",\"candidates\":[",
                 (long long)starts.size(), cp, (long long)shape.heads, (long long)shape.kv_heads,
                 (long long)shape.head_dim, auto_label.c_str());
  }
  for (size_t i = 0; i < cands.size(); ++i) {
    const RingCandidate& c = cands[i];
    const RingTimePrediction& p = c.time;
    const std::string same_as = same[i] >= 0 ? cands[size_t(same[i])].label() : std::string();
    std::printf("candidate: %s scheme %s predicted fwd %.1f us bwd %.1f us total %.1f us%s%s%s\n", c.label().c_str(),
                c.gather ? "gather" : "ring", p.fwd_us, p.bwd_us, p.total_us(), same_as.empty() ? "" : " same as ",
                same_as.c_str(), i == pick ? " <- pick" : "");
    if (json)
      std::fprintf(json, "%s{\"label\":\"%s\",\"name\":\"%s\",\"scheme\":\"%s\",\"predicted_fwd_us\":%.3f,"
                         "\"predicted_bwd_us\":%.3f,\"predicted_fwd_compute_us\":%.3f,"
                         "\"predicted_bwd_compute_us\":%.3f,\"same_as\":%s%s%s,\"pick\":%s}",
                   i ? "," : "", c.label().c_str(), c.name.c_str(), c.gather ? "gather" : "ring", p.fwd_us, p.bwd_us,
                   p.fwd_compute_us, p.bwd_compute_us, same_as.empty() ? "null" : "\"", same_as.c_str(),
                   same_as.empty() ? "" : "\"", i == pick ? "true" : "false");
  }
  std::printf("candidates: %zu, pick %s\n", cands.size(), auto_label.c_str());
  if (json) {
    std::fprintf(json, "]}\n");
    std::fclose(json);
  }
}

}  // namespace rt::bench
