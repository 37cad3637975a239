// Start-up: every "auto" of a config settled in one place, in one order, for train, eval, generate and plan
// (DESIGN.md "Start-up: one resolve step"). Each entry function calls resolve_autos once, on every rank (each
// choice is deterministic, so every rank settles alike), and rank 0 prints the one table of what was resolved, to
// stderr (stdout stays the command's output: generate's JSON, plan --json's objects).
//
// The order (each step reads what the ones before it settled):
//   1. device             auto -> cuda when a GPU is visible, else cpu (plan: cuda is planned without a GPU)
//   2. limits             the memory a rank is judged against (the trainer's device share, or plan's options)
//   3. parallel.cp_a2a    auto -> the u of least predicted time (framework/plan/a2a_auto.h), from the first
//                         training samples' documents or plan --doc-lengths' windows
//   4. parallel.layout    auto -> balanced / zigzag / contiguous over the ring (resolved_layout, framework/config)
//   5. parallel.cp_scheme auto -> per batch (the loader's schedule_batch, parallel/schedule/batch_schedule.h), or
//                         the ring for every batch when only the ring fits (framework/plan/cp_scheme_memory.h)
//   6. train.offload_layers auto -> the fewest layers that fit (framework/plan/trainer_setup.h resolve_offload)
//   7. data.eot_token, train.mlp_chunk: -1 -> what the loader and the model take (shown; the config keeps -1)
//   8. generate: --prefill-chunk 0 (auto) -> one pass or the fewest chunks that fit (framework/plan/plan_generate.h)
// parallel.comm: auto is settled with the process grid (a collective: whether ranks share a GPU) and
// checkpoint.resume: auto with the run directory; the table says where.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/plan/plan_fit.h"
#include "framework/plan/plan_generate.h"
#include "kernels/tensor.h"

namespace rt {

enum class Purpose { train, eval, generate, plan };
const char* purpose_name(Purpose purpose);

struct ResolveInputs {
  // The memory a rank has, for the choices that depend on it; `from` says where it came from. Unset: the trainer's
  // (trainer_device_limits: a GPU's memory over the ranks sharing it; unknown on the CPU).
  std::function<PlanLimits(const Config&, Device, std::string* from)> limits;
  // parallel.cp_a2a: auto from these document windows (T each; plan --doc-lengths) instead of the first samples.
  std::vector<std::vector<int64_t>> a2a_windows;
  std::string a2a_windows_from;     // named in the table (the --doc-lengths file)
  bool data_may_be_missing = false; // plan: data that cannot be read here prices cp_a2a on plain causal samples
  bool searching_seq_len = false;   // plan --max-seq-len: the memory choices are left to the search
  bool planning = false;            // `ringtrain plan` resolving for another command (generate): device: cuda is
                                    // measured without a GPU, as Purpose::plan does
  // generate: the prompt, the new tokens and --prefill-chunk (0: auto); config already prepared for generate.
  int64_t prompt_tokens = 0, new_tokens = 0, prefill_chunk = 0;
};

struct ResolvedRow {
  std::string key, asked, resolved, why;
};

struct Resolved {
  Purpose purpose = Purpose::train;
  Config config;                 // cp_a2a, cp_scheme's fallback and offload_layers settled in it; what it saves
  Device device;
  PlanLimits limits;
  std::string limits_from;
  std::string layout;            // parallel.layout resolved (the config keeps what was asked)
  std::optional<GeneratePlan> generate;  // generate: the prefill and the cache (plan_generate)
  std::vector<ResolvedRow> rows;  // one per auto, in the order above
  // The one start-up table: a heading naming the command, then "  key: asked -> resolved  (why)" per row. Empty when
  // nothing was auto.
  std::string table() const;
};

Resolved resolve_autos(const Config& config, Purpose purpose, const ResolveInputs& inputs = {});

// Writes resolved.table() to stderr (call it on rank 0 only, once).
void print_resolved(const Resolved& resolved);

}  // namespace rt
