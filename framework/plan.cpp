// plan_main: what a config costs, without a GPU and without allocating it. The model and optimizer are
// built for rank (dp 0, cp 0, tp 0) on a measuring arena, exactly as training would build them, so the
// memory figure is the arena's real size; stand-in communicators only report their group sizes.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "framework/mfu.h"
#include "framework/trainer.h"
#include "framework/trainer_setup.h"
#include "kernels/device_memory.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace rt {

namespace {

// A communicator that knows only its size: enough to shape buffers; any traffic is refused.
class SizeOnlyComm final : public Comm {
 public:
  explicit SizeOnlyComm(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string name() const override { return "plan"; }
  void all_reduce_sum(Tensor) override { refuse(); }
  void all_reduce_sum(double*, int) override { refuse(); }
  void broadcast(Tensor, int) override { refuse(); }
  void barrier() override { refuse(); }
  ExchangeHandle ring_exchange_start(const Tensor&, Tensor) override { refuse(); }
  void wait(ExchangeHandle) override { refuse(); }
  ExchangeHandle reduce_scatter_sum_start(const Tensor&, Tensor) override { refuse(); }
  ExchangeHandle all_gather_start(const Tensor&, Tensor) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { RT_CHECK(false, "ringtrain plan does not communicate"); }
  int size_;
};

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

// `ringtrain plan --json`: one object on stdout. fits: peak + reserve <= device_bytes (true when the device
// memory is unknown). reserve: what the arena does not count (CUDA context, cuBLASLt workspace, NCCL).
void print_plan_json(const Config& config, Device device, int64_t params, double model_flops, double hw_flops,
                     size_t peak_bytes) {
  const ParallelConfig& p = config.parallel;
  const double device_bytes = device_memory_bytes(device);
  const double reserve = non_arena_allowance_bytes(device);
  nlohmann::json j = {{"params", params},
                      {"flops_per_step", model_flops},
                      {"hw_flops_per_step", hw_flops},
                      {"peak_bytes_per_rank", peak_bytes},
                      {"reserve_bytes_per_rank", reserve},
                      {"total_bytes_per_rank", double(peak_bytes) + reserve},
                      {"fits", device_bytes <= 0 || double(peak_bytes) + reserve <= device_bytes},
                      {"device_bytes", device_bytes > 0 ? nlohmann::json(device_bytes) : nlohmann::json(nullptr)},
                      {"device", device.is_cuda() ? "cuda" : "cpu"},
                      {"world_size", p.dp * p.cp * p.tp},
                      {"dp", p.dp},
                      {"cp", p.cp},
                      {"tp", p.tp},
                      {"layout", resolved_layout(config)},
                      {"seq_len", config.data.seq_len},
                      {"batch_size", config.train.batch_size},
                      {"tokens_per_step", double(config.train.batch_size) * config.data.seq_len},
                      {"n_layer", config.model.n_layer},
                      {"d_model", config.model.d_model}};
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

int plan_main(const Config& config, bool json) {
  const ParallelConfig& p = config.parallel;
  SizeOnlyComm tp(p.tp), cp(p.cp), dp_cp(p.dp * p.cp);
  ModelComms comms;
  comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp, comms.tp_rank = 0;
  const Device device = plan_device(config);
  const ModelSession session = measure_session(config, comms, device, /*with_optimizer=*/true);
  const Model& model = *session.model;
  const ModelShape& s = model.shape();

  const ModelConfig& m = config.model;
  const int64_t params = count_parameters(m);
  const FlopsModel flops = flops_model(config);
  const double tokens_step = double(config.train.batch_size) * config.data.seq_len;
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
  const int world = p.dp * p.cp * p.tp;
  if (json) {
    print_plan_json(config, device, params, model_flops, hw_flops, session.arena->peak());
    return 0;
  }

  std::printf("plan for %s on %s (%d ranks: dp=%d cp=%d tp=%d, layout %s)\n", config.source_path.c_str(),
              device.str().c_str(), world, p.dp, p.cp, p.tp, resolved_layout(config).c_str());
  std::printf("  model        L=%d d=%d H=%d Hkv=%d D=%d mlp=%s d_ff=%d vocab=%d tied=%s\n", m.n_layer, m.d_model,
              m.n_head, m.n_kv_head, m.head_dim(), m.mlp.c_str(), m.d_ff, m.vocab_size,
              m.tied_embeddings ? "yes" : "no");
  std::printf("  parameters   %s total (%lld), %s in matmuls\n", human_count(double(params)).c_str(),
              (long long)params, human_count(double(flops.params_matmul)).c_str());
  std::printf("  per rank     %lld sequences x %lld tokens, %lld local heads, %lld local KV heads, d_ff/tp %lld\n",
              (long long)s.B, (long long)s.n, (long long)s.Hl, (long long)s.Hkvl, (long long)s.Fl);
  std::printf("  tokens/step  %.0f (batch %d x seq_len %d)\n", tokens_step, config.train.batch_size,
              config.data.seq_len);
  std::printf("  FLOPs/token  %s\n", flops.formula().c_str());
  std::printf("  FLOPs/step   %s model (%s per rank)", human_count(model_flops).c_str(),
              human_count(model_flops / world).c_str());
  if (recompute) std::printf(", about %s with the checkpointing recompute", human_count(hw_flops).c_str());
  std::printf("\n");
  const double peak = peak_tflops(config, device);
  if (peak > 0)
    std::printf("  at 50%% MFU   %.1f s/step on %d x %.0f TFLOP/s\n", model_flops / (0.5 * peak * 1e12 * world), world,
                peak);

  const Arena& arena = *session.arena;
  const double allowance = non_arena_allowance_bytes(device);
  std::printf("  peak memory  %s per rank: arena %s + %s allowance for the CUDA context and cuBLASLt workspace\n",
              human_bytes(double(arena.peak()) + allowance).c_str(), human_bytes(double(arena.peak())).c_str(),
              human_bytes(allowance).c_str());
  std::printf("               (%s, activations %s, activation dtype %s, MLP chunk %lld of %lld tokens)\n",
              device.str().c_str(), config.train.checkpointing.c_str(), device.is_cuda() ? "bf16" : "f32",
              (long long)resolve_mlp_chunk(config.train.mlp_chunk, s.N(), s.Fl), (long long)s.N());
  std::map<std::string, std::pair<size_t, int>> by_name;  // what -> (bytes, count)
  for (const Arena::Entry& e : arena.entries()) {
    auto& slot = by_name[e.what];
    slot.first += e.bytes, slot.second += 1;
  }
  std::vector<std::pair<std::string, std::pair<size_t, int>>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::printf("  largest buffers:\n");
  for (size_t i = 0; i < rows.size() && i < 10; ++i)
    std::printf("    %10s  %5.1f%%  %s%s\n", human_bytes(double(rows[i].second.first)).c_str(),
                100.0 * double(rows[i].second.first) / double(arena.peak()), rows[i].first.c_str(),
                rows[i].second.second > 1 ? (" (x" + std::to_string(rows[i].second.second) + ")").c_str() : "");
  if (device.is_cuda())
    std::printf("  not counted  NCCL buffers (cp/tp > 1 over NCCL); the allowance above covers the rest\n");
  return 0;
}

}  // namespace rt
