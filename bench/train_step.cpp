// Training-step benchmark (DESIGN.md "Tests and benchmarks"): one rank, the whole step as train_main runs
// it (loader, then rt::train_step: forward, fused LM head + loss, backward, AdamW; losses read after the step),
// timed on the host around a device sync. It also prints how long the host took to enqueue the step and how
// many times it waited on the device inside it: when the enqueue ends well before the step and there are no
// waits, the GPU never idles for the host, and CUDA graphs could only save the per-launch gaps.
// Prints ms/step (median over the steps after warm-up), tok/s, MFU with the DESIGN.md formula, and memory
// (the arena, i.e. every buffer of the model, and the device's used memory), then one line
// "RESULT {json}" for bench/torch_gpt_side_by_side.py (with data.documents: eot, every step's document lengths in
// "doc_lengths", sample 0's, warm-up steps first, so that the PyTorch side runs on the same documents).
//
//   bench_train_step <config.yaml> [--warmup N] [--steps N] [--init fast|exact] [--profile]
//                    [--precision bf16|fp8] [--recipe tensorwise|rowwise|block] [--fp8-attention]
//                    [--set key=value ...]
//
// --precision and --recipe set train.precision and fp8.recipe (framework/model/fp8_linear.h); run the binary once per
// setting in one job to compare ours bf16 with ours fp8 per recipe on the same GPU. --fp8-attention sets
// fp8.attention: true (with --precision fp8: the attention backward's dV, dQ, dK in FP8, kernels/attn_fp8.h; on a GPU
// parallel.cp 1, no documents, head_dim 128); its ops show in --profile as attn_bwd_fp8_quantize and
// attn_bwd_fp8_from_codes, where the bf16 backward shows attn_bwd_block_fresh. With --profile the FP8 ops'
// share of the step (the quantization: fp8_amax + fp8_quantize; the FP8 GEMMs) is printed and in RESULT.
//
// --profile runs one more step after the timed ones with every CUDA op timed by events (kernels/op_profile.h)
// and prints GPU ms per op, the step's wall time and what no op accounts for (communication, host work, idle).
//
// --init fast (default) fills the weights from a small N(0, std) pool tiled over every tensor (norms 1),
// which takes a second where the exact init (`ringtrain train`'s, per-element RNG) takes ~20 s at 1.4B; the
// kernels' speed does not depend on the values.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/plan/mfu.h"
#include "framework/model/model.h"
#include "framework/model/optimizer.h"
#include "framework/run/train_step.h"
#include "framework/plan/trainer_setup.h"
#include "kernels/device_memory.h"
#include "kernels/op_profile.h"
#include "kernels/ops.h"

#ifdef RINGTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

using namespace rt;

namespace {

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr, "bench_train_step: %s\nusage: bench_train_step <config.yaml> [--warmup N] [--steps N] "
                       "[--init fast|exact] [--profile] [--precision bf16|fp8] [--recipe tensorwise|rowwise|block] "
                       "[--fp8-attention] [--set key=value ...]\n", msg);
  std::exit(2);
}

void device_sync(Device device) {
#ifdef RINGTRAIN_HAVE_CUDA
  if (device.is_cuda()) {
    const cudaError_t err = cudaDeviceSynchronize();
    RT_CHECK(err == cudaSuccess, "cudaDeviceSynchronize: " << cudaGetErrorString(err));
  }
#else
  (void)device;
#endif
}

// The median of a non-empty sample (the mean of the two middle values for an even count).
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size();
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

// Bytes in use on the device (total - free: context, cuBLASLt workspace and the arena); 0 on the CPU.
double device_used_bytes(Device device) {
#ifdef RINGTRAIN_HAVE_CUDA
  if (device.is_cuda()) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) return double(total_b - free_b);
  }
#else
  (void)device;
#endif
  return 0;
}

// [[a, b], [c]]: nested integer lists as JSON.
std::string json_int_lists(const std::vector<std::vector<int64_t>>& lists) {
  std::string out = "[";
  for (size_t i = 0; i < lists.size(); ++i) {
    out += i ? ",[" : "[";
    for (size_t j = 0; j < lists[i].size(); ++j) out += (j ? "," : "") + std::to_string(lists[i][j]);
    out += "]";
  }
  return out + "]";
}

// Sample 0's documents, in order: the length of each run that starts at a position 0 of its document (a window's
// first, partial document included). (T) positions in, one length per document out.
std::vector<int64_t> sample_document_lengths(const Batch& batch, int64_t T) {
  RT_CHECK(int64_t(batch.document_positions.size()) >= T,
           "the batch has " << batch.document_positions.size() << " document positions for " << T << " tokens");
  std::vector<int64_t> lengths;
  for (int64_t t = 0; t < T; ++t) {
    if (t == 0 || batch.document_positions[size_t(t)] == 0) lengths.push_back(0);
    ++lengths.back();
  }
  return lengths;
}

// Every weight from a pool of 1M N(0, 1) values, tiled with a per-tensor offset and scaled by init_std;
// norm weights 1.
void fast_init(Model& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> pool(size_t(1) << 20);  // (1M)
  for (float& x : pool) x = normal(rng);
  fill(model.master(), 0.f);
  std::vector<float> host;
  size_t shift = 0;
  for (const ParamEntry& e : model.params()) {
    host.resize(size_t(e.numel));  // (numel) this tensor
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = e.init_std > 0 ? pool[(i + shift) % pool.size()] * e.init_std : 1.f;
    shift += 7919;
    copy_cast(model.master().slice(e.offset, e.offset + e.numel),
              Tensor(host.data(), DType::f32, Device::cpu(), {e.numel}));
  }
  model.sync_compute_weights();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage("no config given");
  std::string path = argv[1], init = "fast";
  int warmup = 2, steps = 5;
  bool profile = false;
  std::vector<std::string> sets;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--warmup") warmup = std::atoi(value().c_str());
    else if (a == "--steps") steps = std::atoi(value().c_str());
    else if (a == "--init") init = value();
    else if (a == "--profile") profile = true;
    else if (a == "--set") sets.push_back(value());
    else if (a == "--precision") sets.push_back("train.precision=" + value());
    else if (a == "--recipe") sets.push_back("fp8.recipe=" + value());
    else if (a == "--fp8-attention") sets.push_back("fp8.attention=true");
    else usage(("unknown argument " + a).c_str());
  }
  if (steps < 1 || warmup < 0) usage("--steps must be >= 1 and --warmup >= 0");
  if (init != "fast" && init != "exact") usage("--init must be fast or exact");

  try {
    const Config config = load_config(path, sets, /*world_size=*/1);
    RT_CHECK(config.parallel.dp * config.parallel.cp * config.parallel.tp == 1,
             "bench_train_step runs one rank: set parallel.dp, cp and tp to 1");
    const Device device = resolve_device(config);
    ProcessGrid grid = ProcessGrid::local();
    const auto t_build = std::chrono::steady_clock::now();
    ModelSession session = build_session(config, ModelComms::from(grid), device, /*with_optimizer=*/true);
    Model& model = *session.model;
    AdamW& optimizer = *session.optimizer;
    if (init == "exact") model.init_weights(config.train.seed);
    else fast_init(model, config.train.seed);
    optimizer.zero_state();
    std::unique_ptr<DataLoader> loader = make_loader(config, loader_rank(config, grid), "train");
    device_sync(device);
    const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_build).count();

    const ModelConfig& m = config.model;
    const int64_t tokens = int64_t(config.train.batch_size) * config.data.seq_len;
    const bool fp8 = config.train.precision == "fp8";
    const bool fp8_attention = fp8 && config.fp8.attention;
    const std::string precision =
        fp8 ? "fp8 " + config.fp8.recipe + (fp8_attention ? " + fp8.attention" : "") : config.train.precision;
    std::printf("train_step: %s on %s | L%d d%d H%d V%d | T %lld x batch %d = %lld tokens/step | checkpointing %s "
                "| precision %s | setup %.1f s\n",
                path.c_str(), device_name(device).c_str(), int(m.n_layer), int(m.d_model), int(m.n_head),
                int(m.vocab_size), (long long)config.data.seq_len, int(config.train.batch_size), (long long)tokens,
                config.train.checkpointing.c_str(), precision.c_str(), setup_s);
    std::fflush(stdout);

    std::vector<double> times, enqueue_times;
    double timed_pairs = 0;  // packed documents: the timed steps' visible (query, key) pairs (one rank: the batch's)
    // Packed documents: each step's document lengths in tokens, sample 0's, in the RESULT line (warm-up steps first),
    // so that bench/torch_gpt_side_by_side.py runs its model on the same documents: (warmup + steps) lists.
    std::vector<std::vector<int64_t>> doc_lengths;
    uint64_t max_waits = 0;
    double last_loss = 0;
    for (int s = 1; s <= warmup + steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      const Batch batch = loader->next();
      if (config.data.documents == "eot") doc_lengths.push_back(sample_document_lengths(batch, config.data.seq_len));
      const uint64_t waits0 = cuda_host_waits();
      model.reset_zero_stats();
      train_step(model, optimizer, batch, s, learning_rate(config.optim, s, config.train.steps));
      const auto t_enqueued = std::chrono::steady_clock::now();
      const uint64_t waits = cuda_host_waits() - waits0;
      device_sync(device);
      const auto t1 = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(t1 - t0).count();
      const double enqueue = std::chrono::duration<double>(t_enqueued - t0).count();
      const LossTally tally = step_losses(model, batch);  // after the timed step, as at a logging point
      last_loss = tally.mean(0);
      std::printf("  step %d%s: %.1f ms, loss %.4f | host enqueue %.1f ms, host waits inside the step %llu", s,
                  s <= warmup ? " (warm-up)" : "", dt * 1e3, last_loss, enqueue * 1e3, (unsigned long long)waits);
      if (model.zero() > 0)
        std::printf(" | zero: %lld gathers %.2f GiB, %lld reduce-scatters %.2f GiB, %.1f ms in their calls",
                    (long long)model.zero_stats().gathers, model.zero_stats().gathered_bytes / (1 << 30),
                    (long long)model.zero_stats().reduce_scatters, model.zero_stats().scattered_bytes / (1 << 30),
                    model.zero_stats().host_s * 1e3);
      if (model.zero_stats().fp8_code_bytes > 0)  // fp8.zero3_gather: fp8
        std::printf(" (E4M3 codes %.2f GiB)", model.zero_stats().fp8_code_bytes / (1 << 30));
      std::printf("\n");
      std::fflush(stdout);
      if (s > warmup) {
        times.push_back(dt), enqueue_times.push_back(enqueue), max_waits = std::max(max_waits, waits);
        timed_pairs += batch.visible_pairs;
      }
    }
    const size_t k = times.size();
    const double median = median_of(times);
    const double tok_s = double(tokens) / median;
    const FlopsModel flops = flops_model(config);
    const double peak = peak_tflops(config, device);
    const bool documents = config.data.documents == "eot";  // MFU on visible pairs (DESIGN.md "Metrics and output")
    const double frac = documents ? mfu_of_rate(flops.per_step(double(tokens), timed_pairs / double(times.size())) /
                                                    median, peak, 1)
                                  : mfu(flops, tok_s, peak, 1);
    const double gib = double(1 << 30);
    const double arena_gib = double(session.arena->capacity()) / gib;
    const double used_gib = device_used_bytes(device) / gib;
    std::printf("  median %.1f ms/step over %zu steps | %.0f tok/s | MFU %.1f%% of %.0f TFLOP/s | arena %.2f GiB | "
                "device used %.2f GiB\n", median * 1e3, k, tok_s, 100 * frac, peak, arena_gib, used_gib);
    const double enqueue_median = median_of(enqueue_times);
    std::printf("  host: enqueues a step in %.1f ms (%.1f%% of the step), at most %llu host waits inside a step\n",
                enqueue_median * 1e3, 100 * enqueue_median / median, (unsigned long long)max_waits);
    if (documents)
      std::printf("  MFU = (%s) / step time / peak; %.4g visible pairs per step\n", flops.documents_formula().c_str(),
                  timed_pairs / double(times.size()));
    else
      std::printf("  MFU = (6*P_matmul + 6*L*d*T) * tok/s / peak; %s\n", flops.formula().c_str());
    double quant_ms = -1, fp8_gemm_ms = -1, profile_wall_ms = -1;  // --profile: the FP8 ops' GPU time
    if (profile) {
      const int s = warmup + steps + 1;
      const Batch batch = loader->next();
      device_sync(device);
      const auto t0 = std::chrono::steady_clock::now();
      op_profile_begin();
      train_step(model, optimizer, batch, s, learning_rate(config.optim, s, config.train.steps));
      const std::vector<OpTime> ops = op_profile_end();
      device_sync(device);
      const double wall_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double sum = 0;
      for (const OpTime& op : ops) sum += op.ms;
      std::printf("  profile of one more step (CUDA events around every op; %.1f ms wall with the events):\n", wall_ms);
      std::printf("    %-26s %7s %11s %7s\n", "op", "calls", "GPU ms", "% step");
      for (const OpTime& op : ops)
        std::printf("    %-26s %7lld %11.1f %6.1f%%\n", op.name.c_str(), (long long)op.calls, op.ms, 100 * op.ms / wall_ms);
      std::printf("    %-26s %7s %11.1f %6.1f%%\n", "(no op: comm, host, idle)", "", wall_ms - sum,
                  100 * (wall_ms - sum) / wall_ms);
      quant_ms = 0, fp8_gemm_ms = 0, profile_wall_ms = wall_ms;
      for (const OpTime& op : ops) {
        if (op.name == "fp8_amax" || op.name == "fp8_quantize") quant_ms += op.ms;
        if (op.name == "gemm_fp8") fp8_gemm_ms += op.ms;
      }
      if (fp8)
        std::printf("  fp8: quantization (fp8_amax + fp8_quantize) %.1f ms = %.1f%% of the step; FP8 GEMMs %.1f ms = "
                    "%.1f%%\n", quant_ms, 100 * quant_ms / wall_ms, fp8_gemm_ms, 100 * fp8_gemm_ms / wall_ms);
      std::printf("PROFILE {\"wall_ms\":%.3f", wall_ms);
      for (const OpTime& op : ops) std::printf(",\"%s\":%.3f", op.name.c_str(), op.ms);
      std::printf("}\n");
    }
    std::printf("RESULT {\"config\":\"%s\",\"L\":%d,\"d\":%d,\"H\":%d,\"V\":%d,\"T\":%lld,\"batch\":%d,"
                "\"ckpt\":\"%s\",\"ms_per_step\":%.3f,\"tok_s\":%.1f,\"mfu\":%.4f,\"peak_tflops\":%.0f,"
                "\"arena_gib\":%.3f,\"device_used_gib\":%.3f,\"flop_per_token\":%.6g,\"loss\":%.4f,\"steps\":%zu,"
                "\"enqueue_ms\":%.3f,\"host_waits\":%llu,\"precision\":\"%s\",\"recipe\":\"%s\",\"fp8_peak_tflops\":%.0f,"
                "\"fp8_attention\":%s,\"fp8_quant_ms\":%.3f,\"fp8_gemm_ms\":%.3f,\"profile_wall_ms\":%.3f,"
                "\"visible_pairs\":%.6g,\"doc_lengths\":%s}\n",
                path.c_str(), int(m.n_layer), int(m.d_model), int(m.n_head), int(m.vocab_size),
                (long long)config.data.seq_len, int(config.train.batch_size), config.train.checkpointing.c_str(),
                median * 1e3, tok_s, frac, peak, arena_gib, used_gib, flops.per_token(), last_loss, k,
                enqueue_median * 1e3, (unsigned long long)max_waits, config.train.precision.c_str(),
                fp8 ? config.fp8.recipe.c_str() : "", fp8 ? fp8_peak_tflops_for_gpu(device_name(device)) : 0.0,
                fp8_attention ? "true" : "false", quant_ms, fp8_gemm_ms, profile_wall_ms,
                documents ? timed_pairs / double(times.size()) : 0.0,
                json_int_lists(doc_lengths).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: error: %s\n", e.what());
    return 1;
  }
}
