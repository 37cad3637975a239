// plan_main: what a config costs, without a GPU and without allocating it. The model and optimizer are
// built for rank (dp 0, cp 0, tp 0) on a measuring arena, exactly as training would build them, so the
// memory figure is the arena's real size; stand-in communicators only report their group sizes.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "framework/base/run_errors.h"
#include "framework/plan/mfu.h"
#include "framework/plan/plan.h"
#include "framework/plan/plan_docs.h"
#include "framework/plan/plan_fit.h"
#include "framework/plan/generate_limits.h"
#include "framework/plan/plan_generate.h"
#include "framework/plan/resolve.h"
#include "framework/plan/trainer_setup.h"
#include "kernels/device_memory.h"
#include "parallel/schedule/doc_balance.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace rt {

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1024.0 * 1024 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f TiB", b / (1024.0 * 1024 * 1024 * 1024));
  else if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

namespace {

std::string human_count(double x) {
  char buf[32];
  if (x >= 1e15) std::snprintf(buf, sizeof buf, "%.2fP", x / 1e15);
  else if (x >= 1e12) std::snprintf(buf, sizeof buf, "%.2fT", x / 1e12);
  else if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof buf, "%.1fK", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The memory of the visible GPU; 0 when none is visible (a CUDA config planned on a machine without one).
double visible_gpu_bytes(Device device) {
#ifdef RINGTRAIN_HAVE_CUDA
  cudaDeviceProp props{};
  if (cuda_available() && cudaGetDeviceProperties(&props, device.index) == cudaSuccess)
    return double(props.totalGlobalMem);
#endif
  (void)device;
  return 0;
}

// Which device the plan is for, and why, with how to plan for the other one (a CUDA build plans GPUs without one).
std::string device_note(const Config& config, Device device) {
#ifdef RINGTRAIN_HAVE_CUDA
  const std::string plan_gpus = "--set device=cuda plans GPUs (bf16)";
#else
  const std::string plan_gpus = "--set device=cuda plans GPUs (bf16) in a build with CUDA (-DRINGTRAIN_CUDA=ON; "
                                "no GPU needed)";
#endif
  if (config.device == "auto" && device.is_cpu())
    return "device: auto and no GPU is visible here, so this plans CPU ranks (f32); " + plan_gpus;
  if (config.device == "auto")
    return "device: auto and a GPU is visible here, so this plans GPUs (bf16); --set device=cpu plans CPU ranks";
  if (device.is_cpu()) return "device: cpu, so this plans CPU ranks (f32); " + plan_gpus;
  return "device: cuda, so this plans GPUs (bf16); --set device=cpu plans CPU ranks";
}

// The limits the plan is judged against. CPU ranks have no memory of their own: the ranks of a node share the
// host's memory, so each is judged against its share (host / ranks per node). A GPU rank has its GPU (or
// --device-memory-gib) and shares the host only for pinned offload buffers.
PlanLimits plan_limits(const Config& config, Device device, const PlanArgs& args, std::string* where) {
  const ParallelConfig& p = config.parallel;
  const int world = p.dp * p.cp * p.tp;
  PlanLimits limits;
  const bool host_given = args.host_memory_gib > 0;
  limits.host_bytes = host_given ? args.host_memory_gib * kGiB : double(host_physical_bytes());
  const std::string host_from = host_given ? "--host-memory-gib" : "this host's";
  if (device.is_cpu()) {
    if (args.device_memory_gib > 0) {
      char value[64];
      std::snprintf(value, sizeof value, "%g", args.device_memory_gib);
      throw RunError(kExitUsage, std::string("--device-memory-gib ") + value + " is a GPU's memory, but this plan is "
                                 "for CPU ranks (" + device_note(config, device) + "); add --set device=cuda to plan "
                                 "GPUs, or give --host-memory-gib (per node) and --ranks-per-node for CPU ranks");
    }
    limits.ranks_per_node = args.ranks_per_node > 0 ? args.ranks_per_node : world;
    limits.device_bytes = limits.host_bytes / limits.ranks_per_node;
    *where = "each CPU rank's share of " + host_from + " " + human_bytes(limits.host_bytes) + " host memory over " +
             std::to_string(limits.ranks_per_node) + " rank(s) per node" +
             (args.ranks_per_node > 0 ? "" : " (all of them on one host; --ranks-per-node R to change)");
    return limits;
  }
  limits.ranks_per_node = args.ranks_per_node > 0 ? args.ranks_per_node : std::min(world, 8);
  limits.device_bytes = args.device_memory_gib > 0 ? args.device_memory_gib * kGiB : visible_gpu_bytes(device);
  *where = args.device_memory_gib > 0     ? "--device-memory-gib per GPU"
           : limits.device_bytes > 0      ? "the visible GPU's memory"
                                          : "unknown GPU memory: no GPU is visible (give --device-memory-gib G)";
  return limits;
}

}  // namespace

// What a CUDA rank uses beyond the arena: the CUDA context (~0.5 GiB on an H200), the cuBLASLt workspace and
// the allocator's rounding. Measured device-used minus arena on one H200: 0.55 GiB (gpt-1b-64k full, 40.66 vs
// 40.11 GiB) to about 2 GiB in this session's runs; the plan adds the upper figure so that its total is
// comparable with measured device memory. NCCL buffers (cp/tp > 1 over NCCL) come on top.
double non_arena_allowance_bytes(Device device) { return device.is_cuda() ? 2.0 * 1024 * 1024 * 1024 : 0; }

std::string check_plan_memory_gib(const std::string& option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const bool number = !text.empty() && end && *end == '\0';
  if (number && std::isfinite(v) && v > 0 && v <= kMaxPlanMemoryGiB) return "";
  return "'" + text + "' must be a number of GiB above 0 and at most " +
         std::to_string(int64_t(kMaxPlanMemoryGiB)) + " (1 PiB), e.g. " + option + " " +
         (option == "--host-memory-gib" ? "512" : "139") + "; leave it out to use " +
         (option == "--host-memory-gib" ? "this host's memory" : "the visible GPU's memory");
}

std::string check_ranks_per_node(const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (!text.empty() && end && *end == '\0' && v >= 1 && v <= 1 << 20) return "";
  return "'" + text + "' must be a whole number of ranks of at least 1, e.g. --ranks-per-node 8; "
         "leave it out for the default (CPU: every rank on one host; GPU: min(world, 8))";
}

namespace {

// `ringtrain plan --json`: one object on stdout. fits: the device (and host) limits hold (true when unknown).
// reserve: what the arena does not count (CUDA context, cuBLASLt workspace, NCCL).
// The arena's FP8 workspaces (framework/model/fp8_linear.h names them "fp8: ...").
double fp8_workspace_bytes(const PlanPoint& pt) {
  double bytes = 0;
  for (const auto& [what, b] : pt.largest)
    if (what.rfind("fp8:", 0) == 0) bytes += b;
  return bytes;
}

// "  precision    fp8 (fp8.recipe tensorwise, ...)" for the text plan.
void print_precision(const Config& config, const PlanPoint& pt, Device device) {
  if (config.train.precision != "fp8") {
    std::printf("  precision    bf16: every GEMM in %s (train.precision: fp8 for E4M3 linear layers)\n",
                device.is_cuda() ? "bf16" : "f32");
    return;
  }
  const int L = config.model.n_layer;
  const double ws = fp8_workspace_bytes(pt);
  std::printf("  precision    fp8, fp8.recipe %s: the linear GEMMs of %s in E4M3 (current scaling); FP8 workspaces %s "
              "(%.1f%% of the arena), no FP8 weight copies kept\n",
              config.fp8.recipe.c_str(),
              config.fp8.bf16_first_last ? ("blocks 1.." + std::to_string(L - 2) + " (first and last in bf16)").c_str()
                                         : "every block",
              human_bytes(ws).c_str(), pt.arena_bytes > 0 ? 100 * ws / pt.arena_bytes : 0.0);
  if (config.fp8.attention)
    std::printf("               fp8.attention: the attention backward's dV, dQ, dK on E4M3 operands (forward and dP "
                "in %s)%s\n",
                device.is_cuda() ? "bf16" : "f32",
                device.is_cuda() ? (fp8_attention_cuda_refusal(config).empty()
                                        ? "; the sm_90a kernel over each whole sequence, its codes in the arena"
                                        : "; outside the GPU kernel's scope: refused on a GPU")
                                 : "");
  if (config.fp8.attention && config.fp8.attention_kv == "e4m3")
    std::printf("               fp8.attention_kv e4m3: K and V rounded to E4M3 once per layer and call (a factor per "
                "128 rows and K/V head); the ring's K/V hops carry the codes and factors (half of bf16's bytes)\n");
  if (config.fp8.zero3_gather == "fp8")
    std::printf("               fp8.zero3_gather fp8: %s\n",
                pt.zero == 3 ? "the FP8 blocks' ZeRO-3 weight all-gathers send E4M3 codes (1 byte an element, half of "
                               "bf16) and one factor per matrix; norms in bf16"
                             : "no effect here (ZeRO 3 is not in effect: the dp x cp group is one rank)");
  const double fp8_peak = fp8_peak_tflops_for_gpu(device_name(device));
  if (device.is_cuda() && fp8_peak > 0)
    std::printf("               MFU stays against the bf16 peak; the FP8 peak of this GPU is %.0f TFLOP/s\n", fp8_peak);
}

void print_plan_json(const Config& config, Device device, int64_t params, double model_flops, double hw_flops,
                     const PlanPoint& pt, const PlanLimits& limits, const std::string& device_why,
                     const std::string& limits_from, const nlohmann::json& generate) {
  const ParallelConfig& p = config.parallel;
  const double reserve = pt.allowance_bytes + pt.nccl_bytes;
  const double device_bytes = device.is_cpu() ? limits.host_bytes : limits.device_bytes;
  nlohmann::json j = {{"params", params},
                      {"flops_per_step", model_flops},
                      {"hw_flops_per_step", hw_flops},
                      {"peak_bytes_per_rank", pt.arena_bytes},
                      {"reserve_bytes_per_rank", reserve},
                      {"nccl_bytes_per_rank", pt.nccl_bytes},
                      {"total_bytes_per_rank", pt.device_bytes()},
                      {"host_bytes_per_rank", pt.host_bytes_per_rank},
                      {"host_bytes_per_node", pt.host_bytes_per_node},
                      {"fits", pt.fits()},
                      // The memory of one device: a GPU's, or for CPU ranks the host's, which its ranks share
                      // (launch/sweep/runner.py divides it so); rank_limit_bytes: what one rank may use.
                      {"device_bytes", device_bytes > 0 ? nlohmann::json(device_bytes) : nlohmann::json(nullptr)},
                      {"rank_limit_bytes", limits.device_bytes > 0 ? nlohmann::json(limits.device_bytes)
                                                                   : nlohmann::json(nullptr)},
                      {"host_bytes", limits.host_bytes > 0 ? nlohmann::json(limits.host_bytes) : nlohmann::json(nullptr)},
                      {"device", device.is_cuda() ? "cuda" : "cpu"},
                      {"device_note", device_why},
                      {"device_bytes_from", limits_from},
                      {"ranks_per_node", limits.ranks_per_node},
                      {"world_size", p.dp * p.cp * p.tp},
                      {"dp", p.dp},
                      {"cp", p.cp},
                      {"cp_a2a", p.cp_a2a},
                      {"ring", p.ring()},
                      {"a2a_forward_bytes_per_layer", pt.a2a.forward_bytes},
                      {"a2a_backward_bytes_per_layer", pt.a2a.backward_bytes},
                      {"a2a_buffer_bytes", pt.a2a.buffer_bytes},
                      {"a2a_replica_bytes", pt.a2a.replica_bytes},
                      {"a2a_head_groups", pt.a2a.head_groups},
                      {"tp", p.tp},
                      {"zero", pt.zero},
                      {"offload_layers", pt.offload_layers},
                      {"layout", resolved_layout(config)},
                      {"cp_scheme", cp_scheme_setting_name(p.cp_scheme)},
                      {"seq_len", pt.seq_len},
                      {"batch_size", config.train.batch_size},
                      {"tokens_per_step", double(config.train.batch_size) * pt.seq_len},
                      {"n_layer", config.model.n_layer},
                      {"d_model", config.model.d_model}};
  j["precision"] = config.train.precision;  // train.precision; fp8: the recipe and the FP8 workspaces in the arena
  if (config.train.precision == "fp8") {
    j["fp8_recipe"] = config.fp8.recipe;
    j["fp8_bf16_first_last"] = config.fp8.bf16_first_last;
    j["fp8_attention"] = config.fp8.attention;  // the attention backward's dV, dQ, dK in FP8
    j["fp8_attention_kv"] = config.fp8.attention_kv;  // bf16 | e4m3: K/V as the ring sends them and attention reads them
    j["fp8_zero3_gather"] = config.fp8.zero3_gather;  // bf16 | fp8: the ZeRO-3 weight all-gather of the FP8 blocks
    j["fp8_workspace_bytes"] = fp8_workspace_bytes(pt);
  }
  if (!generate.is_null()) j["generate"] = generate;  // --generate-context
  std::printf("%s\n", j.dump().c_str());
}

void print_memory(const PlanPoint& pt, const PlanLimits& limits, Device device, int top) {
  if (device.is_cpu()) {
    std::printf("  host/rank    %s (the arena; %d ranks per node: %s)", human_bytes(pt.device_bytes()).c_str(),
                limits.ranks_per_node, human_bytes(pt.device_bytes() * limits.ranks_per_node).c_str());
    std::printf("  [of %s per rank, %s per node: %s]", human_bytes(limits.device_bytes).c_str(),
                human_bytes(limits.host_bytes).c_str(), pt.fits_device ? "fits" : "DOES NOT FIT");
  } else {
    std::printf("  device/rank  %s = arena %s + %s allowance (CUDA context, cuBLASLt workspace) + %s NCCL buffers",
                human_bytes(pt.device_bytes()).c_str(), human_bytes(pt.arena_bytes).c_str(),
                human_bytes(pt.allowance_bytes).c_str(), human_bytes(pt.nccl_bytes).c_str());
    if (limits.device_bytes > 0)
      std::printf("  [of %s: %s]", human_bytes(limits.device_bytes).c_str(), pt.fits_device ? "fits" : "DOES NOT FIT");
  }
  std::printf("\n");
  if (pt.offload_layers > 0 || pt.host_bytes_per_rank > 0) {
    std::printf("  host/node    %s pinned = %d ranks x %s (block inputs of %d offloaded layers)",
                human_bytes(pt.host_bytes_per_node).c_str(), limits.ranks_per_node,
                human_bytes(pt.host_bytes_per_rank).c_str(), pt.offload_layers);
    if (limits.host_bytes > 0)
      std::printf("  [of %s: %s]", human_bytes(limits.host_bytes).c_str(), pt.fits_host ? "fits" : "DOES NOT FIT");
    std::printf("\n");
  }
  std::printf("  largest buffers (%s):\n", device.str().c_str());
  for (size_t i = 0; i < pt.largest.size() && int(i) < top; ++i)
    std::printf("    %10s  %5.1f%%  %s\n", human_bytes(pt.largest[i].second).c_str(),
                100.0 * pt.largest[i].second / pt.arena_bytes, pt.largest[i].first.c_str());
}

// --generate-context: `ringtrain generate` on this config's grid (its cp and tp; dp 1, no optimizer), resolved as
// generate resolves it (framework/plan/resolve.h, Purpose::generate on the prepared config: cp_a2a: auto priced on
// the plain causal prompt; the prefill chunked as generate would chunk it under the plan's memory limit, or
// --prefill-chunk). Where its autos resolve otherwise than the training plan's, or are generate's own, their rows
// join the plan's table ("generate: ...").
GeneratePlan plan_for_generate(const Config& given, const PlanArgs& args, Resolved& plan) {
  RT_CHECK(args.generate || !args.generate_new_given, "--max-new-tokens and --prefill-chunk are for planning "
           "generate; give the prompt length too, e.g. --generate-context 131072 --max-new-tokens "
           << args.generate_new_tokens);
  const std::string out_of_range = check_generate_counts(
      {args.generate_context, args.generate_new_tokens, args.generate_prefill_chunk, "--generate-context"});
  RT_CHECK(out_of_range.empty(), out_of_range);
  Config c = given;
  prepare_generate_config(c);
  ResolveInputs in;
  in.limits = [&plan](const Config&, Device, std::string* from) {  // the plan's limits, as before
    *from = plan.limits_from;
    return plan.limits;
  };
  in.planning = true;
  in.data_may_be_missing = true;
  in.prompt_tokens = args.generate_context, in.new_tokens = args.generate_new_tokens;
  in.prefill_chunk = args.generate_prefill_chunk;
  const Resolved g = resolve_autos(c, Purpose::generate, in);
  for (const ResolvedRow& row : g.rows) {
    const bool as_planned = std::any_of(plan.rows.begin(), plan.rows.end(), [&](const ResolvedRow& p) {
      return p.key == row.key && p.resolved == row.resolved;
    });
    const std::string key = row.key.rfind("generate", 0) == 0 ? row.key : "generate: " + row.key;
    if (!as_planned) plan.rows.push_back({key, row.asked, row.resolved, row.why});
  }
  return *g.generate;
}

nlohmann::json generate_json(const GeneratePlan& g, const PlanLimits& limits) {
  return {{"prompt_tokens", g.layout.prompt},
          {"new_tokens", g.layout.new_tokens},
          {"prefill_tokens_per_rank", g.layout.rows_per_rank},
          {"cache_rows_per_rank", g.layout.capacity},
          {"kv_bytes_per_rank", g.kv_bytes},
          {"cache_bytes_per_rank", g.cache_bytes},
          {"prefill_bytes_per_rank", g.prefill_bytes},
          {"prefill_chunk", g.layout.chunk},
          {"prefill_chunks", g.layout.chunks},
          {"prefill_chunk_reason", g.chunk_note},
          {"prefill_chunk_bytes_per_rank", g.chunk_bytes},
          {"total_bytes_per_rank", g.device_bytes()},
          {"fits", limits.device_bytes <= 0 || g.device_bytes() <= limits.device_bytes}};
}

void print_generate(const GeneratePlan& g, const PlanLimits& limits, Device device) {
  std::printf("  generate     prompt %lld + %lld new tokens: KV cache %s per rank (%lld rows, K and V %s in %s), "
              "prefill arena %s (%lld tokens per rank, no optimizer); %s per rank with the allowance",
              (long long)g.layout.prompt, (long long)g.layout.new_tokens, human_bytes(g.cache_bytes).c_str(),
              (long long)g.layout.capacity, human_bytes(g.kv_bytes).c_str(), device.is_cuda() ? "bf16" : "f32",
              human_bytes(g.prefill_bytes).c_str(), (long long)g.layout.rows_per_rank,
              human_bytes(g.device_bytes()).c_str());
  if (limits.device_bytes > 0)
    std::printf("  [of %s: %s]", human_bytes(limits.device_bytes).c_str(),
                g.device_bytes() <= limits.device_bytes ? "fits" : "DOES NOT FIT");
  std::printf("\n");
  if (g.layout.chunk > 0)
    std::printf("  generate     prefill in %lld chunks of %lld tokens (%lld per cp rank; each chunk's queries meet "
                "every rank's cache shard, %s of queries and states in the cache's arena): %s\n",
                (long long)g.layout.chunks, (long long)g.layout.chunk, (long long)g.layout.rows_per_rank,
                human_bytes(g.chunk_bytes).c_str(), g.chunk_note.c_str());
}

}  // namespace

namespace {

// Every auto settled as the trainer settles it (framework/plan/resolve.h), judged against the plan's limits:
// parallel.cp_a2a: auto from the --doc-lengths windows when given, else from the first training samples (plain causal
// when the data cannot be read here); cp_scheme: auto's memory fallback and offload_layers: auto as the trainer takes
// them, except while --max-seq-len searches.
Resolved resolve_for_plan(const Config& config, const PlanArgs& args) {
  ResolveInputs in;
  in.limits = [&args](const Config& c, Device device, std::string* from) { return plan_limits(c, device, args, from); };
  if (!args.doc_lengths.empty() && config.parallel.cp_a2a_auto()) {
    in.a2a_windows = doc_length_windows(read_doc_lengths(args.doc_lengths), config.data.seq_len, kDocLengthWindows);
    in.a2a_windows_from = args.doc_lengths;
  }
  in.data_may_be_missing = true;
  in.searching_seq_len = args.max_seq_len;
  return resolve_autos(config, Purpose::plan, in);
}

// What a step costs in FLOPs (model: 6 N per token plus attention; hw: with the checkpointing's recompute).
struct StepFlops {
  FlopsModel flops;
  double tokens = 0, model = 0, hw = 0;
};

StepFlops step_flops(const Config& planned) {
  const ModelConfig& m = planned.model;
  StepFlops f;
  f.flops = flops_model(planned);
  f.tokens = double(planned.train.batch_size) * planned.data.seq_len;
  f.model = f.flops.per_token() * f.tokens;
  // Full checkpointing re-runs each block's forward (1/3 of its fwd + bwd work) in the backward.
  const double block_share = (f.flops.per_token() - 6.0 * double(m.vocab_size) * m.d_model) / f.flops.per_token();
  // Selective re-runs every block matmul but wo (q, k, v and the MLP input side; attention output is kept):
  // 2 FLOPs per weight per token, no attention.
  const double kv_dim = double(m.n_kv_head) * m.head_dim();
  const double selective_extra = 2.0 * m.n_layer * f.tokens *
      (double(m.d_model) * (m.d_model + 2 * kv_dim) + double(m.d_ff) * m.d_model * (m.mlp == "swiglu" ? 2 : 1));
  const std::string& ckpt = planned.train.checkpointing;
  f.hw = ckpt == "full"        ? f.model * (1.0 + block_share / 3.0)
         : ckpt == "selective" ? f.model + selective_extra
                               : f.model;
  return f;
}

// --doc-lengths with --json: a second JSON object, on its own line.
void print_doc_lengths_json(const DocLengthPlan& d) {
  const auto per_layout = [](const double (&v)[4]) {
    return nlohmann::json{{"contiguous", v[0]}, {"zigzag", v[1]}, {"striped", v[2]}, {"balanced", v[3]}};
  };
  const nlohmann::json j = {{"doc_lengths", d.path},
                            {"visible_pairs_per_sample", d.pairs_per_sample},
                            {"causal_pairs_per_sample", d.causal_pairs_per_sample},
                            {"attention_flops_per_step", d.attention_flops_per_step},
                            {"imbalance", per_layout(d.imbalance)},
                            {"work_efficiency", per_layout(d.work_efficiency)},
                            {"ring_efficiency", per_layout(d.ring_efficiency)},
                            {"balanced_picks", d.balanced_picks},
                            {"balanced_ms_per_sample", d.balanced_ms},
                            {"cp_a2a_pick", d.a2a.pick}};
  std::printf("%s\n", j.dump().c_str());
}

// The head exchange of cp_a2a > 1: heads per rank, bytes per layer, buffers and the overlap.
void print_a2a_exchange(const ParallelConfig& p, const HeadExchangeShape& x) {
  std::printf("  all-to-all   cp %d = ring %d x a2a %d: %lld query / %lld KV heads per rank in attention%s\n", p.cp,
              p.ring(), p.cp_a2a, (long long)x.q_heads, (long long)x.kv_heads,
              x.replicated ? " (KV heads replicated: fewer local KV heads than a2a ranks need)" : "");
  std::printf("  exchange     per rank per layer: %s forward (Q, K, V out; O back), %s backward (Q, K, V, O, dO out; "
              "dQ, dK, dV back); buffers %s (in the arena%s%s)\n",
              human_bytes(x.forward_bytes).c_str(), human_bytes(x.backward_bytes).c_str(),
              human_bytes(x.buffer_bytes).c_str(), x.replicated ? ", of which replicated K/V " : "",
              x.replicated ? human_bytes(x.replica_bytes).c_str() : "");
  if (x.head_groups > 1)
    std::printf("  overlap      %d head groups: each group's exchange travels under the other's ring; exposed: "
                "1/%d of each way\n", x.head_groups, x.head_groups);
  else
    std::printf("  overlap      none: one head group (%s), the exchange is exposed\n",
                x.replicated ? "replicated K/V" : "the KV heads per rank do not split in two");
}

// The model, its parameters, the step's tokens and FLOPs, and the activations.
void print_model_and_flops(const Config& config, const Config& planned, const Resolved& r, const StepFlops& f,
                           int zero_in_effect) {
  const ModelConfig& m = config.model;
  const ParallelConfig& p = config.parallel;
  const int world = p.dp * p.cp * p.tp;
  const int64_t params = count_parameters(m);
  std::printf("  model        L=%d d=%d H=%d Hkv=%d D=%d mlp=%s d_ff=%d vocab=%d tied=%s\n", m.n_layer, m.d_model,
              m.n_head, m.n_kv_head, m.head_dim(), m.mlp.c_str(), m.d_ff, m.vocab_size,
              m.tied_embeddings ? "yes" : "no");
  std::printf("  parameters   %s total (%lld), %s in matmuls\n", human_count(double(params)).c_str(),
              (long long)params, human_count(double(f.flops.params_matmul)).c_str());
  std::printf("  per rank     %lld sequences x %lld tokens, ZeRO shards %d\n",
              (long long)sequences_per_rank(planned), (long long)tokens_per_rank(planned),
              zero_in_effect > 0 ? p.dp * p.cp : 1);
  std::printf("  tokens/step  %.0f (batch %d x seq_len %d)\n", f.tokens, config.train.batch_size,
              planned.data.seq_len);
  std::printf("  FLOPs/token  %s\n", f.flops.formula().c_str());
  std::printf("  FLOPs/step   %s model (%s per rank)", human_count(f.model).c_str(),
              human_count(f.model / world).c_str());
  if (config.train.checkpointing != "none")
    std::printf(", about %s with the checkpointing recompute", human_count(f.hw).c_str());
  std::printf("\n");
  const double peak = peak_tflops(config, r.device);
  if (peak > 0)
    std::printf("  at 50%% MFU   %.1f s/step on %d x %.0f TFLOP/s\n", f.model / (0.5 * peak * 1e12 * world), world,
                peak);
  std::printf("  activations  %s, dtype %s, MLP chunk %lld tokens\n", config.train.checkpointing.c_str(),
              r.device.is_cuda() ? "bf16" : "f32",
              (long long)resolved_mlp_chunk(planned, sequences_per_rank(planned) * tokens_per_rank(planned)));
}

// --doc-lengths: the mix's visible pairs and attention FLOPs, per layout the imbalance and the kernels' efficiency,
// balanced's picks (the loader's own, schedule_batch), each all-to-all degree, and each candidate's prediction.
void print_doc_lengths(const ParallelConfig& p, const DocLengthPlan& d) {
  // The layouts are over the ring (cp / cp_a2a ranks).
  const std::string at = p.ring() == p.cp ? "cp=" + std::to_string(p.cp)
                                          : "ring " + std::to_string(p.ring()) + " (cp=" + std::to_string(p.cp) + ")";
  std::printf("  documents    %s: %.4g visible pairs per sample (%.1f%% of causal), mean of %d windows\n",
              d.path.c_str(), d.pairs_per_sample, 100.0 * d.pairs_per_sample / d.causal_pairs_per_sample, d.windows);
  std::printf("  attention    %s FLOPs/step on visible pairs (12 L d_model pairs batch)\n",
              human_count(d.attention_flops_per_step).c_str());
  std::printf("  imbalance    at %s: contiguous %.3f, zigzag %.3f, striped %.3f, balanced %.3f "
              "(sum over ring steps of the slowest rank's pairs / the mean)\n",
              at.c_str(), d.imbalance[0], d.imbalance[1], d.imbalance[2], d.imbalance[3]);
  std::printf("  kernel work  at %s: contiguous %.3f, zigzag %.3f, striped %.3f, balanced %.3f "
              "(one whole call's attention tiles / the ring calls' tiles; 1 = no extra work)\n",
              at.c_str(), d.work_efficiency[0], d.work_efficiency[1], d.work_efficiency[2], d.work_efficiency[3]);
  std::printf("  ring speed   at %s: contiguous %.3f, zigzag %.3f, striped %.3f, balanced %.3f "
              "(whole-call tiles / (cp x critical path); 1 = a perfect cp-fold speed-up)\n",
              at.c_str(), d.ring_efficiency[0], d.ring_efficiency[1], d.ring_efficiency[2], d.ring_efficiency[3]);
  std::printf("  balanced     picks %s (as the loader schedules them); %.1f ms per sample on the host (the loader)\n",
              d.balanced_picks.c_str(), d.balanced_ms);
  std::printf("  candidates   predicted at %s (bench/NOTES.md \"Ring time model\"): efficiency = (one whole call / cp) "
              "/ critical path with communication; bytes per layer, all ranks, fwd + bwd\n", at.c_str());
  std::printf("  cp_a2a       each u predicted over the same windows (ring of cp/u on H/(tp u) heads + the exposed "
              "exchange at ~370 GB/s; efficiency against one whole call / cp):\n");
  for (const A2aCandidate& c : d.a2a.candidates) {
    if (!c.admissible) {
      std::printf("    u=%-3d not admissible: %s\n", c.u, c.why_not.c_str());
      continue;
    }
    std::printf("    u=%-3d fwd %.3f  bwd %.3f  %.3f ms/layer (ring %d: %s; exchange %s/layer, %.3f ms exposed)%s\n",
                c.u, c.efficiency_fwd(), c.efficiency_bwd(), c.total_us() * 1e-3 / d.windows, c.ring,
                c.ring_layout.c_str(), human_bytes(c.exchange_bytes).c_str(),
                (c.exchange_fwd_us + c.exchange_bwd_us) * 1e-3 / d.windows, c.u == d.a2a.pick ? "  <- pick" : "");
  }
  std::printf("    %s\n", d.a2a.why.c_str());
  for (const DocLengthPlan::Candidate& c : d.candidates)
    std::printf("    %-20s fwd %.3f  bwd %.3f  comm %4.1f%%  bytes %s of the ring's %s (%.0f%%)%s\n", c.name.c_str(),
                c.eff_fwd, c.eff_bwd, 100 * c.comm_share, human_bytes(c.bytes).c_str(),
                human_bytes(c.ring_bytes).c_str(), c.ring_bytes > 0 ? 100 * c.bytes / c.ring_bytes : 0.0,
                c.picked ? ("  <- picked " + std::to_string(c.picked) + "/" + std::to_string(d.windows)).c_str() : "");
  std::printf("  cp_scheme    each ring candidate's assignment run by the gather scheme (one exchange of the rows "
              "queries see; parallel.cp_scheme), same model (the gather: rows above are the chooser's own):\n");
  for (const DocLengthPlan::Candidate& c : d.candidates)
    if (c.name.rfind("gather:", 0) != 0)
      std::printf("    %-20s fwd %.3f  bwd %.3f  comm %4.1f%%  bytes %s (%.0f%% of the ring's)  faster than the ring "
                  "in %d/%d\n",
                  c.name.c_str(), c.gather_eff_fwd, c.gather_eff_bwd, 100 * c.gather_comm_share,
                  human_bytes(c.gather_bytes).c_str(), c.ring_bytes > 0 ? 100 * c.gather_bytes / c.ring_bytes : 0.0,
                  c.gather_wins, d.windows);
}

// The plan as text: the grid and where its limits come from, the exchange, --max-seq-len's answer, the model and its
// FLOPs, --doc-lengths, the memory and --generate-context.
void print_plan_text(const Resolved& r, const Config& planned, const PlanPoint& pt, const StepFlops& f,
                     const PlanArgs& args, const GeneratePlan& gen) {
  const Config& config = r.config;
  const ParallelConfig& p = config.parallel;
  std::printf("plan for %s on %s (%d ranks: dp=%d cp=%d (ring %d x a2a %d) tp=%d, layout %s, zero %d%s)\n",
              config.source_path.c_str(), r.device.str().c_str(), p.dp * p.cp * p.tp, p.dp, p.cp, p.ring(), p.cp_a2a,
              p.tp, r.layout.c_str(), pt.zero, config.train.offload == "activations" ? ", offload activations" : "");
  std::printf("  device       %s\n", device_note(config, r.device).c_str());
  std::printf("  memory       judged against %s\n", r.limits_from.c_str());
  if (!zero_note(config).empty()) std::printf("  %s\n", zero_note(config).c_str());
  if (p.cp_a2a > 1) print_a2a_exchange(p, pt.a2a);
  if (args.max_seq_len) {
    if (pt.seq_len == 0) {
      std::printf("  max seq_len  none: even %d tokens (the smallest step of the layout) do not fit\n",
                  seq_len_step(config));
      print_memory(pt, r.limits, r.device, 6);
      return;
    }
    std::printf("  max seq_len  %d tokens (%.2fM; steps of %d), offload_layers %d, checkpointing %s\n", pt.seq_len,
                pt.seq_len / 1048576.0, seq_len_step(config), pt.offload_layers, config.train.checkpointing.c_str());
  }
  print_model_and_flops(config, planned, r, f, pt.zero);
  print_precision(config, pt, r.device);
  if (!args.doc_lengths.empty()) print_doc_lengths(p, doc_length_plan(planned, args.doc_lengths));
  print_memory(pt, r.limits, r.device, 10);
  if (args.generate) print_generate(gen, r.limits, r.device);
}

}  // namespace

int plan_main(const Config& given, const PlanArgs& args) {
  Resolved r = resolve_for_plan(given, args);
  GeneratePlan gen;
  if (args.generate || args.generate_new_given) gen = plan_for_generate(given, args, r);
  print_resolved(r);  // stderr, once: stdout stays the plan (and --json's objects)
  const Config& config = r.config;
  Config planned = config;
  PlanPoint pt;
  if (args.max_seq_len) {
    pt = max_seq_len(config, r.device, r.limits);
    if (pt.seq_len > 0) planned.data.seq_len = pt.seq_len;
  } else {
    pt = plan_point(config, r.device, r.limits);
  }
  const StepFlops f = step_flops(planned);
  if (!args.json) {
    print_plan_text(r, planned, pt, f, args, gen);
    return 0;
  }
  print_plan_json(planned, r.device, count_parameters(config.model), f.model, f.hw, pt, r.limits,
                  device_note(config, r.device), r.limits_from, args.generate ? generate_json(gen, r.limits)
                                                                               : nlohmann::json());
  if (!args.doc_lengths.empty()) print_doc_lengths_json(doc_length_plan(planned, args.doc_lengths));
  return 0;
}

}  // namespace rt
