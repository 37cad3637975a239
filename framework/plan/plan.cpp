// plan_main: what a config costs, without a GPU and without allocating it. The model and optimizer are
// built for rank (dp 0, cp 0, tp 0) on a measuring arena, exactly as training would build them, so the
// memory figure is the arena's real size; stand-in communicators only report their group sizes.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "framework/plan/mfu.h"
#include "framework/plan/plan_docs.h"
#include "framework/plan/plan_fit.h"
#include "framework/plan/plan.h"
#include "framework/plan/trainer_setup.h"
#include "kernels/device_memory.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace rt {

namespace {

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

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

Device plan_device(const Config& config) {
  if (config.device == "cuda") return Device::cuda(0);  // measured only: no GPU needed
  return resolve_device(config);
}

// Memory of the device a rank would run on: the GPU's total memory, or the host's physical memory (shared by
// every rank on the host); 0 when unknown (a CUDA config planned where no GPU is visible).
double device_memory_bytes(Device device) {
  if (device.is_cpu()) return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
#ifdef RINGTRAIN_HAVE_CUDA
  cudaDeviceProp props{};
  if (cuda_available() && cudaGetDeviceProperties(&props, device.index) == cudaSuccess)
    return double(props.totalGlobalMem);
#endif
  return 0;
}

}  // namespace

// What a CUDA rank uses beyond the arena: the CUDA context (~0.5 GiB on an H200), the cuBLASLt workspace and
// the allocator's rounding. Measured device-used minus arena on one H200: 0.55 GiB (gpt-1b-64k full, 40.66 vs
// 40.11 GiB) to about 2 GiB in this session's runs; the plan adds the upper figure so that its total is
// comparable with measured device memory. NCCL buffers (cp/tp > 1 over NCCL) come on top.
double non_arena_allowance_bytes(Device device) { return device.is_cuda() ? 2.0 * 1024 * 1024 * 1024 : 0; }

namespace {

// `ringtrain plan --json`: one object on stdout. fits: the device (and host) limits hold (true when unknown).
// reserve: what the arena does not count (CUDA context, cuBLASLt workspace, NCCL).
void print_plan_json(const Config& config, Device device, int64_t params, double model_flops, double hw_flops,
                     const PlanPoint& pt, const PlanLimits& limits) {
  const ParallelConfig& p = config.parallel;
  const double reserve = pt.allowance_bytes + pt.nccl_bytes;
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
                      {"device_bytes", limits.device_bytes > 0 ? nlohmann::json(limits.device_bytes) : nlohmann::json(nullptr)},
                      {"host_bytes", limits.host_bytes > 0 ? nlohmann::json(limits.host_bytes) : nlohmann::json(nullptr)},
                      {"device", device.is_cuda() ? "cuda" : "cpu"},
                      {"world_size", p.dp * p.cp * p.tp},
                      {"dp", p.dp},
                      {"cp", p.cp},
                      {"tp", p.tp},
                      {"zero", pt.zero},
                      {"offload_layers", pt.offload_layers},
                      {"layout", resolved_layout(config)},
                      {"seq_len", pt.seq_len},
                      {"batch_size", config.train.batch_size},
                      {"tokens_per_step", double(config.train.batch_size) * pt.seq_len},
                      {"n_layer", config.model.n_layer},
                      {"d_model", config.model.d_model}};
  std::printf("%s\n", j.dump().c_str());
}

void print_memory(const PlanPoint& pt, const PlanLimits& limits, Device device, int top) {
  std::printf("  device/rank  %s = arena %s + %s allowance (CUDA context, cuBLASLt workspace) + %s NCCL buffers",
              human_bytes(pt.device_bytes()).c_str(), human_bytes(pt.arena_bytes).c_str(),
              human_bytes(pt.allowance_bytes).c_str(), human_bytes(pt.nccl_bytes).c_str());
  if (limits.device_bytes > 0)
    std::printf("  [of %s: %s]", human_bytes(limits.device_bytes).c_str(), pt.fits_device ? "fits" : "DOES NOT FIT");
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

}  // namespace

int plan_main(const Config& config, const PlanArgs& args) {
  const ParallelConfig& p = config.parallel;
  const Device device = plan_device(config);
  PlanLimits limits;
  limits.device_bytes = args.device_memory_gib > 0 ? args.device_memory_gib * 1024.0 * 1024 * 1024
                                                   : device_memory_bytes(device);
  limits.host_bytes = args.host_memory_gib > 0 ? args.host_memory_gib * 1024.0 * 1024 * 1024
                                               : double(host_physical_bytes());
  const int world = p.dp * p.cp * p.tp;
  limits.ranks_per_node = args.ranks_per_node > 0 ? args.ranks_per_node : std::min(world, 8);
  Config planned = config;
  PlanPoint pt;
  if (args.max_seq_len) {
    pt = max_seq_len(config, device, limits);
    if (pt.seq_len > 0) planned.data.seq_len = pt.seq_len;
  } else {
    pt = plan_point(config, device, limits);
  }

  const ModelConfig& m = config.model;
  const int64_t params = count_parameters(m);
  const FlopsModel flops = flops_model(planned);
  const double tokens_step = double(config.train.batch_size) * planned.data.seq_len;
  const double model_flops = flops.per_token() * tokens_step;
  const bool recompute = config.train.checkpointing != "none";
  // Full checkpointing re-runs each block's forward (1/3 of its fwd + bwd work) in the backward.
  const double block_share = (flops.per_token() - 6.0 * double(m.vocab_size) * m.d_model) / flops.per_token();
  // Selective re-runs every block matmul but wo (q, k, v and the MLP input side; attention output is kept):
  // 2 FLOPs per weight per token, no attention.
  const double kv_dim = double(m.n_kv_head) * m.head_dim();
  const double selective_extra = 2.0 * m.n_layer * tokens_step *
      (double(m.d_model) * (m.d_model + 2 * kv_dim) + double(m.d_ff) * m.d_model * (m.mlp == "swiglu" ? 2 : 1));
  const double hw_flops = config.train.checkpointing == "full"      ? model_flops * (1.0 + block_share / 3.0)
                          : config.train.checkpointing == "selective" ? model_flops + selective_extra
                                                                      : model_flops;
  if (args.json) {
    print_plan_json(planned, device, params, model_flops, hw_flops, pt, limits);
    if (!args.doc_lengths.empty()) {  // a second JSON object, on its own line
      const DocLengthPlan d = doc_length_plan(planned, args.doc_lengths);
      const nlohmann::json j = {{"doc_lengths", d.path},
                                {"visible_pairs_per_sample", d.pairs_per_sample},
                                {"causal_pairs_per_sample", d.causal_pairs_per_sample},
                                {"attention_flops_per_step", d.attention_flops_per_step},
                                {"imbalance", {{"contiguous", d.imbalance[0]}, {"zigzag", d.imbalance[1]},
                                               {"striped", d.imbalance[2]}, {"balanced", d.imbalance[3]}}},
                                {"work_efficiency", {{"contiguous", d.work_efficiency[0]}, {"zigzag", d.work_efficiency[1]},
                                                     {"striped", d.work_efficiency[2]}, {"balanced", d.work_efficiency[3]}}},
                                {"ring_efficiency", {{"contiguous", d.ring_efficiency[0]}, {"zigzag", d.ring_efficiency[1]},
                                                     {"striped", d.ring_efficiency[2]}, {"balanced", d.ring_efficiency[3]}}},
                                {"balanced_picks", d.balanced_picks},
                                {"balanced_ms_per_sample", d.balanced_ms}};
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  }

  std::printf("plan for %s on %s (%d ranks: dp=%d cp=%d tp=%d, layout %s, zero %d%s)\n", config.source_path.c_str(),
              device.str().c_str(), world, p.dp, p.cp, p.tp, resolved_layout(config).c_str(), pt.zero,
              config.train.offload == "activations" ? ", offload activations" : "");
  if (!zero_note(config).empty()) std::printf("  %s\n", zero_note(config).c_str());
  if (args.max_seq_len) {
    if (pt.seq_len == 0) {
      std::printf("  max seq_len  none: even %d tokens (the smallest step of the layout) do not fit\n",
                  seq_len_step(config));
      print_memory(pt, limits, device, 6);
      return 0;
    }
    std::printf("  max seq_len  %d tokens (%.2fM; steps of %d), offload_layers %d, checkpointing %s\n", pt.seq_len,
                pt.seq_len / 1048576.0, seq_len_step(config), pt.offload_layers, config.train.checkpointing.c_str());
  }
  std::printf("  model        L=%d d=%d H=%d Hkv=%d D=%d mlp=%s d_ff=%d vocab=%d tied=%s\n", m.n_layer, m.d_model,
              m.n_head, m.n_kv_head, m.head_dim(), m.mlp.c_str(), m.d_ff, m.vocab_size,
              m.tied_embeddings ? "yes" : "no");
  std::printf("  parameters   %s total (%lld), %s in matmuls\n", human_count(double(params)).c_str(),
              (long long)params, human_count(double(flops.params_matmul)).c_str());
  std::printf("  per rank     %lld sequences x %lld tokens, ZeRO shards %d\n",
              (long long)sequences_per_rank(planned), (long long)tokens_per_rank(planned),
              pt.zero > 0 ? p.dp * p.cp : 1);
  std::printf("  tokens/step  %.0f (batch %d x seq_len %d)\n", tokens_step, config.train.batch_size,
              planned.data.seq_len);
  std::printf("  FLOPs/token  %s\n", flops.formula().c_str());
  std::printf("  FLOPs/step   %s model (%s per rank)", human_count(model_flops).c_str(),
              human_count(model_flops / world).c_str());
  if (recompute) std::printf(", about %s with the checkpointing recompute", human_count(hw_flops).c_str());
  std::printf("\n");
  const double peak = peak_tflops(config, device);
  if (peak > 0)
    std::printf("  at 50%% MFU   %.1f s/step on %d x %.0f TFLOP/s\n", model_flops / (0.5 * peak * 1e12 * world), world,
                peak);
  std::printf("  activations  %s, dtype %s, MLP chunk %lld tokens\n", config.train.checkpointing.c_str(),
              device.is_cuda() ? "bf16" : "f32",
              (long long)resolve_mlp_chunk(config.train.mlp_chunk,
                                           sequences_per_rank(planned) * tokens_per_rank(planned),
                                           m.d_ff / p.tp));
  if (!args.doc_lengths.empty()) {
    const DocLengthPlan d = doc_length_plan(planned, args.doc_lengths);
    std::printf("  documents    %s: %.4g visible pairs per sample (%.1f%% of causal), mean of %d windows\n",
                d.path.c_str(), d.pairs_per_sample, 100.0 * d.pairs_per_sample / d.causal_pairs_per_sample, d.windows);
    std::printf("  attention    %s FLOPs/step on visible pairs (12 L d_model pairs batch)\n",
                human_count(d.attention_flops_per_step).c_str());
    std::printf("  imbalance    at cp=%d: contiguous %.3f, zigzag %.3f, striped %.3f, balanced %.3f "
                "(sum over ring steps of the slowest rank's pairs / the mean)\n",
                p.cp, d.imbalance[0], d.imbalance[1], d.imbalance[2], d.imbalance[3]);
    std::printf("  kernel work  at cp=%d: contiguous %.3f, zigzag %.3f, striped %.3f, balanced %.3f "
                "(one whole call's attention tiles / the ring calls' tiles; 1 = no extra work)\n",
                p.cp, d.work_efficiency[0], d.work_efficiency[1], d.work_efficiency[2], d.work_efficiency[3]);
    std::printf("  ring speed   at cp=%d: contiguous %.3f, zigzag %.3f, striped %.3f, balanced %.3f "
                "(whole-call tiles / (cp x critical path); 1 = a perfect cp-fold speed-up)\n",
                p.cp, d.ring_efficiency[0], d.ring_efficiency[1], d.ring_efficiency[2], d.ring_efficiency[3]);
    std::printf("  balanced     picks %s; %.1f ms per sample on the host (the loader)\n", d.balanced_picks.c_str(),
                d.balanced_ms);
    std::printf("  candidates   predicted at cp=%d (bench/NOTES.md \"Ring time model\"): efficiency = (one whole call / cp) / "
                "critical path with communication; bytes per layer, all ranks, fwd + bwd\n", p.cp);
    for (const DocLengthPlan::Candidate& c : d.candidates)
      std::printf("    %-20s fwd %.3f  bwd %.3f  comm %4.1f%%  bytes %s of the ring's %s (%.0f%%)%s\n", c.name.c_str(),
                  c.eff_fwd, c.eff_bwd, 100 * c.comm_share, human_bytes(c.bytes).c_str(),
                  human_bytes(c.ring_bytes).c_str(), c.ring_bytes > 0 ? 100 * c.bytes / c.ring_bytes : 0.0,
                  c.picked ? ("  <- picked " + std::to_string(c.picked) + "/" + std::to_string(d.windows)).c_str() : "");
  }
  print_memory(pt, limits, device, 10);
  return 0;
}

}  // namespace rt
