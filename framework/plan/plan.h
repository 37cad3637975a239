// `ringtrain plan` (framework/main.cpp): what a config costs, without a GPU and without allocating it.
#pragma once
#include <string>

#include "framework/config/config.h"
#include "kernels/tensor.h"

namespace rt {

struct PlanArgs {
  bool json = false;
  bool max_seq_len = false;       // search the longest data.seq_len that fits
  double device_memory_gib = 0;   // per GPU; 0: not given (the visible GPU's). GPU plans only
  double host_memory_gib = 0;     // per node; 0: not given (this host's)
  int ranks_per_node = 0;         // 0: not given (CPU: the whole world on one host; GPU: min(world, 8))
  std::string doc_lengths;        // a document-length file: visible-pair attention FLOPs and imbalance per layout
  bool generate = false;             // --generate-context given: also plan `ringtrain generate`
  int64_t generate_context = 0;      // ... with a prompt of this many tokens
  bool generate_new_given = false;   // --max-new-tokens or --prefill-chunk given (they need --generate-context)
  int64_t generate_new_tokens = 64;  // ... and this many new tokens (generate's --max-new-tokens)
  int64_t generate_prefill_chunk = 0;  // ... prefilled in chunks of this many tokens (0: auto, as generate)
};
// The largest --device-memory-gib / --host-memory-gib taken (1 PiB): anything above is a typo.
constexpr double kMaxPlanMemoryGiB = 1024.0 * 1024;
// "" when `text` is a usable value of the memory option `option` (a finite number of GiB in (0, 1 PiB]), else
// the refusal, naming the value and one that works. For main's CLI11 checks, which put the option's name first.
std::string check_plan_memory_gib(const std::string& option, const std::string& text);
// The same for --ranks-per-node (a whole number >= 1).
std::string check_ranks_per_node(const std::string& text);
// Prints parameter count, FLOPs per step, predicted peak memory per rank and what dominates it. No GPU needed.
// json: print one JSON object instead (params, flops_per_step, peak_bytes_per_rank, fits, device_bytes, ...),
// read by launch/sweep.sh.
int plan_main(const Config& config, const PlanArgs& args);
// A byte count for people: "85.60 MiB", "1.50 GiB", "2.00 TiB" (KiB below a MiB).
std::string human_bytes(double bytes);
// Device memory a rank uses outside the arena, added to `ringtrain plan`'s total: 2 GiB on CUDA (CUDA context,
// cuBLASLt workspace, allocator rounding; measured 0.55-2 GiB on an H200), 0 on CPU.
double non_arena_allowance_bytes(Device device);

}  // namespace rt
