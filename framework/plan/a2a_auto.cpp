// parallel.cp_a2a: auto resolved at start-up (framework/plan/a2a_auto.h).
#include "framework/plan/a2a_auto.h"

#include "framework/data/data.h"

namespace rt {

A2aChoice a2a_choice_for(const Config& config, const std::vector<std::vector<int64_t>>& doc_starts) {
  const ParallelConfig& p = config.parallel;
  A2aModelShape shape;
  shape.heads = config.model.n_head;
  shape.kv_heads = config.model.n_kv_head;
  shape.head_dim = config.model.head_dim();
  shape.tp = p.tp;
  shape.dkv_wire_bytes = p.dkv_wire == "bf16" ? 2 : 4;
  const bool documents = !doc_starts.empty();
  // The loader's layout over a ring of more than one rank (resolved_layout: auto is balanced with documents,
  // zigzag without); balanced prices each ring's best candidate ("").
  Config as_loader = config;
  as_loader.parallel.cp_a2a = 1;
  as_loader.data.documents = documents ? "eot" : "none";
  std::string layout = resolved_layout(as_loader);
  if (layout == "balanced") layout.clear();
  const std::vector<std::vector<int64_t>> causal = {std::vector<int64_t>(size_t(config.data.seq_len), 0)};
  return choose_a2a_degree(documents ? doc_starts : causal, p.cp, shape, layout);
}

std::string resolve_cp_a2a_auto(Config& config, int samples) {
  if (!config.parallel.cp_a2a_auto()) return "";
  const std::vector<std::vector<int64_t>> starts = first_samples_doc_starts(config, samples);
  const A2aChoice choice = a2a_choice_for(config, starts);
  config.parallel.cp_a2a = choice.pick;
  const std::string from = starts.empty() ? "plain causal samples of " + std::to_string(config.data.seq_len) + " tokens"
                                          : "the documents of the first " + std::to_string(starts.size()) +
                                                " training samples";
  return choice.summary() + "; from " + from;
}

}  // namespace rt
