// The one resolve step at start-up (framework/plan/resolve.h).
#include "framework/plan/resolve.h"

#include <cstdio>
#include <sstream>

#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/plan/a2a_auto.h"
#include "framework/plan/cp_scheme_memory.h"
#include "framework/plan/trainer_setup.h"

namespace rt {

const char* purpose_name(Purpose purpose) {
  switch (purpose) {
    case Purpose::train: return "train";
    case Purpose::eval: return "eval";
    case Purpose::generate: return "generate";
    case Purpose::plan: return "plan";
  }
  return "?";
}

namespace {

// 1. device: auto | cpu | cuda. plan measures a CUDA config without a GPU (nothing is allocated).
void resolve_device_step(Resolved& r, const ResolveInputs& in) {
  const Config& c = r.config;
  const bool planning = r.purpose == Purpose::plan || in.planning;
  r.device = planning && c.device == "cuda" ? Device::cuda(0) : resolve_device(c);
  // fp8.attention outside the CUDA kernel's scope: device: cuda is validate_config's refusal; auto that lands on a GPU
  // is refused here, once for every rank. A plan says so in its table instead.
  const std::string fp8_refusal = c.device == "auto" && r.device.is_cuda() ? fp8_attention_cuda_refusal(c) : "";
  if (!fp8_refusal.empty()) {
    RT_CHECK(planning, fp8_refusal);
    r.rows.push_back({"fp8.attention", "true", "refused on this GPU at start-up", fp8_refusal});
  }
  if (c.device == "auto")
    r.rows.push_back({"device", "auto", r.device.str(),
                      r.device.is_cuda() ? "a GPU is visible" : "no GPU is visible here (or the build has no CUDA)"});
}

// 2. the memory a rank is judged against.
void resolve_limits_step(Resolved& r, const ResolveInputs& in) {
  if (in.limits) {
    r.limits = in.limits(r.config, r.device, &r.limits_from);
    return;
  }
  r.limits = trainer_device_limits(r.device);
  r.limits_from = r.device.is_cuda() ? "the GPU's memory over the ranks sharing it" : "unknown (CPU ranks)";
}

// 3. parallel.cp_a2a: auto. The row's why is the choice's summary without its "parallel.cp_a2a: auto -> u" head.
void resolve_a2a_step(Resolved& r, const ResolveInputs& in) {
  Config& c = r.config;
  if (!c.parallel.cp_a2a_auto()) return;
  std::string line;
  if (!in.a2a_windows.empty()) {
    const A2aChoice choice = a2a_choice_for(c, in.a2a_windows);
    c.parallel.cp_a2a = choice.pick;
    line = choice.summary() + "; from " + in.a2a_windows_from;
  } else {
    try {
      line = resolve_cp_a2a_auto(c);
    } catch (const Error& e) {
      if (!in.data_may_be_missing) throw;
      Config causal = c;  // plan: priced on plain causal samples, and said so
      causal.data.documents = "none";
      line = resolve_cp_a2a_auto(causal) + " (the data could not be read here: " + e.what() + ")";
      c.parallel.cp_a2a = causal.parallel.cp_a2a;
    }
  }
  const std::string head = "parallel.cp_a2a: auto -> " + std::to_string(c.parallel.cp_a2a);
  const std::string why = line.rfind(head, 0) == 0 ? line.substr(head.size()) : line;
  r.rows.push_back({"parallel.cp_a2a", "auto", std::to_string(c.parallel.cp_a2a),
                    why.find_first_not_of(' ') == std::string::npos ? "" : why.substr(why.find_first_not_of(' '))});
}

// 4. parallel.layout: auto (resolved_layout decides; the config keeps auto, as it saves what was asked).
void resolve_layout_step(Resolved& r) {
  const Config& c = r.config;
  r.layout = resolved_layout(c);
  if (c.parallel.layout != "auto") return;
  const int ring = c.parallel.ring();
  const std::string why = ring <= 1 ? "one rank in the ring: every layout is the identity"
                          : c.data.documents == "eot"
                              ? "documents on a ring of " + std::to_string(ring) + " ranks: each sample's order is "
                                "chosen from its documents"
                              : "a causal ring of " + std::to_string(ring) + " ranks: zigzag evens out the work";
  r.rows.push_back({"parallel.layout", "auto", r.layout, why});
}

// 5. parallel.cp_scheme: auto: per batch, or the ring for every batch when only the ring fits.
void resolve_cp_scheme_step(Resolved& r, const ResolveInputs& in) {
  Config& c = r.config;
  if (c.data.documents != "eot" || c.parallel.cp_scheme != CpSchemeSetting::automatic) return;
  if (c.parallel.ring() <= 1) {
    r.rows.push_back({"parallel.cp_scheme", "auto", "ring", "one rank in the ring: nothing to exchange"});
    return;
  }
  std::string note;
  if (!in.searching_seq_len) note = resolve_cp_scheme_memory(c, r.device, r.limits);
  if (!note.empty()) {
    r.rows.push_back({"parallel.cp_scheme", "auto", "ring", note});
    return;
  }
  const std::string memory = in.searching_seq_len      ? "; --max-seq-len searches with the gather's buffers"
                             : r.limits.device_bytes <= 0 ? "; not judged against memory (the limit is unknown)"
                                                          : "; the gather's buffers fit " + r.limits_from;
  r.rows.push_back({"parallel.cp_scheme", "auto", "per batch",
                    "the loader runs each batch with the scheme of least predicted time (schedule_batch)" + memory});
}

// 6. train.offload_layers: auto: the fewest layers that fit.
void resolve_offload_step(Resolved& r, const ResolveInputs& in) {
  Config& c = r.config;
  if (c.train.offload != "activations" || c.train.offload_layers != "auto" || in.searching_seq_len) return;
  if (r.purpose == Purpose::plan) {  // judged against the plan's limits; a plan that does not fit says so
    c.train.offload_layers = std::to_string(plan_point(c, r.device, r.limits).offload_layers);
  } else {
    c = resolve_offload(c, r.device);  // refuses an offload the host cannot hold
  }
  r.rows.push_back({"train.offload_layers", "auto", c.train.offload_layers,
                    "the fewest layers whose offloaded block inputs let a rank fit " + r.limits_from});
}

// 7. data.eot_token and train.mlp_chunk: -1 shown as what the loader and the model take.
void show_derived_step(Resolved& r) {
  const Config& c = r.config;
  if (c.data.documents == "eot" && c.data.eot_token == -1)
    r.rows.push_back({"data.eot_token", "-1", std::to_string(resolved_eot_token(c)),
                      "shards: meta.json's beside them, else GPT-2's 50256"});
  if (c.train.mlp_chunk != -1 || r.purpose == Purpose::generate) return;
  const ParallelConfig& p = c.parallel;
  if (p.dp < 1 || p.cp < 1 || p.tp < 1 || c.train.batch_size % p.dp != 0 || c.data.seq_len % p.cp != 0) return;
  const int64_t tokens = int64_t(c.train.batch_size / p.dp) * (c.data.seq_len / p.cp);
  const int64_t chunk = resolved_mlp_chunk(c, tokens);
  const bool halved = mlp_chunk_budget_log2(c.train.precision == "fp8", parse_checkpointing(c.train.checkpointing)) <
                      mlp_chunk_budget_log2(false, ActivationCheckpointing::none);
  r.rows.push_back({"train.mlp_chunk", "-1 (auto)",
                    chunk < tokens ? std::to_string(chunk) + " tokens" : "none (all " + std::to_string(tokens) +
                                                                             " tokens of a rank at once)",
                    halved ? "chunks only when a rank's tokens x d_ff / tp exceed 2^26 (fp8 with checkpointing: "
                             "the FP8 workspaces fit in what the smaller chunk saves)"
                           : "chunks only when a rank's tokens x d_ff / tp exceed 2^27"});
}

// 8. generate: the prefill chunk (and the cache), as `ringtrain plan --generate-context` counts them.
void resolve_generate_step(Resolved& r, const ResolveInputs& in) {
  if (r.purpose != Purpose::generate || in.prompt_tokens < 1) return;
  r.generate = plan_generate(r.config, r.device, in.prompt_tokens, in.new_tokens,
                             PrefillChunking{in.prefill_chunk, r.limits.device_bytes, r.limits_from});
  if (in.prefill_chunk != 0) return;
  const GenerateLayout& g = r.generate->layout;
  r.rows.push_back({"generate --prefill-chunk", "0 (auto)",
                    g.chunk > 0 ? std::to_string(g.chunk) + " tokens x " + std::to_string(g.chunks) + " chunks"
                                : "one pass",
                    g.chunk > 0 ? r.generate->chunk_note : "the one-pass prefill fits " + r.limits_from});
}

}  // namespace

Resolved resolve_autos(const Config& config, Purpose purpose, const ResolveInputs& inputs) {
  Resolved r;
  r.purpose = purpose;
  r.config = config;
  resolve_device_step(r, inputs);
  resolve_limits_step(r, inputs);
  resolve_a2a_step(r, inputs);
  resolve_layout_step(r);
  resolve_cp_scheme_step(r, inputs);
  resolve_offload_step(r, inputs);
  show_derived_step(r);
  resolve_generate_step(r, inputs);
  // Settled with the process grid and the run directory (not here): said, so that the table lists every auto.
  const ParallelConfig& p = r.config.parallel;
  if (p.comm == "auto" && p.dp * p.cp * p.tp > 1)
    r.rows.push_back({"parallel.comm", "auto", r.device.is_cuda() ? "nccl or mpi, with the grid" : "mpi",
                      r.device.is_cuda() ? "nccl when every rank has a GPU of its own, else mpi (said when the grid "
                                           "is built)"
                                         : "CPU tensors"});
  return r;
}

std::string Resolved::table() const {
  if (rows.empty()) return "";
  std::ostringstream os;
  os << "start-up (" << purpose_name(purpose) << "): each auto, resolved once, alike on every rank\n";
  for (const ResolvedRow& row : rows) {
    os << "  " << row.key << ": " << row.asked << " -> " << row.resolved << "\n";
    if (!row.why.empty()) os << "      " << row.why << "\n";
  }
  return os.str();
}

void print_resolved(const Resolved& resolved) {
  const std::string text = resolved.table();
  if (!text.empty()) std::fputs(text.c_str(), stderr);
}

}  // namespace rt
