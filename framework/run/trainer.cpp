// train_main (framework/run/trainer.h): the training loop around Model and AdamW.
//
// Start-up, each part agreed on by every rank (framework/base/run_errors.h: an error is printed once, exit 2):
//   rank 0 locks run_dir (framework/run/run_dir.h) -> every rank plans the start (fresh / continue / branch,
//   framework/run/resume_plan.h) and reconciles the config with the checkpoint -> rank 0 writes run.json,
//   config.yaml and de-duplicates metrics.jsonl -> model, loaders, checkpoint.
// One step: next batch -> train_step (framework/run/train_step.h: forward + fused loss + backward -> loss guard ->
// gradient all-reduce over dp x cp -> shared-KV reduction over tp -> clip + AdamW, skipped on the device when
// the norm is not finite) -> log. Losses are global token sums / global token counts. Rank 0 prints and
// writes files; every rank computes.
// On CUDA the host waits for the GPU only at a logging point (log.every, and the last step), eval and saves:
// the losses, the grad norm, the divergence guard's count and the ring timings are fetched there.
// Stopping: SIGUSR1, SIGTERM and SIGINT alike finish the step, save a complete checkpoint and return 128+N.
// The divergence guard (framework/run/divergence_guard.h) is read at each logging point and before every save;
// on divergence every rank returns 3 and nothing is saved.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "framework/base/run_errors.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/checkpoint_internal.h"
#include "framework/checkpoint/checkpoint_sharded.h"
#include "framework/config/rope_scaling.h"
#include "framework/data/prefetch_loader.h"
#include "framework/hf/init_from.h"
#include "framework/plan/a2a_auto.h"
#include "framework/plan/cp_scheme_memory.h"
#include "framework/plan/mfu.h"
#include "framework/plan/trainer_setup.h"
#include "framework/run/divergence_guard.h"
#include "framework/run/metrics.h"
#include "framework/run/resume_plan.h"
#include "framework/run/run_dir.h"
#include "framework/run/train_step.h"
#include "framework/run/trainer.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"
#include "parallel/comm/fault.h"
#include "parallel/comm/watchdog.h"

namespace rt {

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int signal) { g_stop_signal.store(signal); }

// Installs the stop handlers for USR1, TERM and INT; restores the previous ones when destroyed.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    for (int i = 0; i < 3; ++i) old_[i] = std::signal(kSignals[i], on_stop_signal);
  }
  ~StopSignals() {
    for (int i = 0; i < 3; ++i) std::signal(kSignals[i], old_[i]);
  }

 private:
  static constexpr int kSignals[3] = {SIGUSR1, SIGTERM, SIGINT};
  void (*old_[3])(int);
};

std::string format_bytes(double bytes) {
  char buf[32];
  if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  return buf;
}

struct SaveTarget {
  std::string lineage_dir, lineage, parent, resumed_from;
};

// Saves model + optimizer + state: every rank writes its own byte ranges of the unsharded files (no rank
// assembles the full state; framework/checkpoint/checkpoint_sharded.h). Collective over the world, under
// parallel.save_timeout_s. Returns the directory.
// Packed documents, once at the first step: the first sample's ring order (balanced: the chooser's pick), the scheme
// the ring runs the batch with (parallel.cp_scheme; auto: with both predictions), and the bytes the batch's plan moves
// per layer (all ranks, forward + backward) against the plain ring's.
void print_ring_bytes_line(const RingAttention& ring, const Batch& batch) {
  const double planned = ring.planned_bytes_per_layer(), full = ring.ring_bytes_per_layer();
  if (full <= 0) {
    std::printf("documents: first sample's ring order %s (one rank: no ring hops)\n", batch.ring_layout.c_str());
    return;
  }
  auto text = [](double bytes) {
    if (bytes >= 1024.0 * 1024) return format_bytes(bytes);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024);
    return std::string(buf);
  };
  std::string scheme = cp_scheme_name(ring.scheme());
  if (batch.cp_ring_us > 0 || batch.cp_gather_us > 0) {  // parallel.cp_scheme: auto
    char buf[128];
    std::snprintf(buf, sizeof buf, " (auto: predicted ring %.0f us, gather %.0f us per layer, fwd + bwd)",
                  batch.cp_ring_us, batch.cp_gather_us);
    scheme += buf;
  }
  std::printf("documents: first sample's ring order %s, scheme %s; its batch moves %s of K/V and dK/dV per layer "
              "(all ranks, fwd + bwd), %.0f%% of the full ring's %s (metrics: ring_sent_bytes_per_layer, rank 0)\n",
              batch.ring_layout.c_str(), scheme.c_str(), text(planned).c_str(), 100 * planned / full,
              text(full).c_str());
}

std::string save(const Config& config, const SaveTarget& target, ModelSession& session, DataLoader& loader,
                 int64_t step, Comm& world, const std::map<std::string, std::string>& extra_metadata) {
  watchdog_set_phase("the save of step " + std::to_string(step), /*saving=*/true);
  TrainState state;
  state.step = step;
  state.data_cursor = loader.cursor();
  state.rng_state = "none";  // training draws no random numbers after init; data is a function of the cursor
  state.config_hash = model_config_hash(config);
  state.lineage = target.lineage, state.parent = target.parent;
  state.config = config_as_map(config);
  state.guard_passed = true;  // every save follows a guard check
  std::vector<std::string> keep;
  if (!target.resumed_from.empty()) keep.push_back(target.resumed_from);
  const std::string dir = save_checkpoint_sharded(target.lineage_dir, *session.model, *session.optimizer, state,
                                                  config.checkpoint.keep_last, world, extra_metadata, keep);
  watchdog_set_phase("step " + std::to_string(step), /*saving=*/false);
  return dir;
}

// What every checkpoint of this run records besides the model config: the context it trains at and the
// Hugging Face directory its weights first came from (export-hf copies the tokenizer from there).
std::map<std::string, std::string> run_metadata(const Config& config, const std::string& hf_source) {
  std::map<std::string, std::string> meta = {{"context_length", std::to_string(config.data.seq_len)}};
  if (!hf_source.empty()) meta["hf_source"] = hf_source;
  return meta;
}

// Reads this rank's ranges of a checkpoint (any grid, any ZeRO stage); a weights-only checkpoint (import-hf)
// leaves the optimizer at zero. Collective over the world.
TrainState load_into(ModelSession& session, const std::string& dir, Comm& world,
                     std::map<std::string, std::string>* model_metadata = nullptr) {
  return load_checkpoint_sharded(dir, *session.model, session.optimizer.get(), world, model_metadata);
}

void remove_checkpoints(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
    if (ec) throw Error("train.overwrite: cannot delete " + d + ": " + ec.message());
  }
}

}  // namespace

int train_main(const Config& loaded) {
  const StopSignals signals;  // from the start: a signal during set-up stops after the first step
  Config config = loaded;
  Device device;  // device: cuda without a GPU is the config's error, found by every rank alike
  agree_on([&] { device = resolve_device(config); }, kExitUsage);
  std::string a2a_auto_line;  // parallel.cp_a2a: auto -> u, before the grid (every rank computes the same u)
  agree_on([&] { a2a_auto_line = resolve_cp_a2a_auto(config); }, kExitUsage);
  std::string scheme_memory_line;  // parallel.cp_scheme: auto -> ring when only the ring fits the device
  agree_on([&] { scheme_memory_line = resolve_cp_scheme_memory(config, device, trainer_device_limits(device)); },
           kExitUsage);
  ProcessGrid grid = make_process_grid(config);
  const bool rank0 = grid.world().rank() == 0;
  const int world_size = grid.dims().world();
  const TrainConfig& tc = config.train;

  // ---- the run directory: one owner, a plan, the config reconciled with the checkpoint ----
  std::unique_ptr<RunDirLock> lock;
  agree_on([&] { if (rank0) lock = std::make_unique<RunDirLock>(tc.run_dir); }, kExitUsage);
  RunPlan plan;
  std::vector<std::string> changes;
  int64_t resumed_step = 0;
  agree_on([&] {
    plan = plan_run(config);
    if (!plan.resume_from.empty()) {
      changes = reconcile_resume_config(config, plan.resume_from, world_size);
      resumed_step = read_checkpoint_state(plan.resume_from).step;
    }
  }, kExitUsage);
  std::string moved_metrics;
  agree_on([&] {
    if (!rank0) return;
    remove_checkpoints(plan.wipe);
    prepare_run_dir(config);
    if (plan.write_record) write_run_record(tc.run_dir, {plan.lineage, plan.parent});
    const std::string metrics_file = metrics_path(config);
    moved_metrics = plan.resume_from.empty() ? move_metrics_aside(metrics_file)
                                             : move_metrics_after(metrics_file, resumed_step);
  }, kExitUsage);
  const SaveTarget target{lineage_dir(tc.run_dir, plan.lineage), plan.lineage, plan.parent, plan.resume_from};

  const std::string layout = resolved_layout(config);
  if (rank0) {
    std::printf("%s", config_table(config).c_str());
    for (const std::string& note : config.notes) std::printf("%s\n", note.c_str());
    if (!a2a_auto_line.empty()) std::printf("%s\n", a2a_auto_line.c_str());
    if (!scheme_memory_line.empty()) std::printf("%s\n", scheme_memory_line.c_str());
    const std::string hybrid = config.parallel.cp_a2a > 1 ? " (ring " + std::to_string(config.parallel.ring()) +
                                                               " x a2a " + std::to_string(config.parallel.cp_a2a) + ")"
                                                         : "";
    const std::string scheme = config.data.documents == "eot" && config.parallel.ring() > 1
                                   ? " cp_scheme=" + std::string(cp_scheme_setting_name(config.parallel.cp_scheme))
                                   : "";
    std::printf("cp=%d%s layout=%s%s tp=%d dp=%d device=%s\n", config.parallel.cp, hybrid.c_str(), layout.c_str(),
                scheme.c_str(), config.parallel.tp, config.parallel.dp, device_name(device).c_str());
    if (!zero_note(config).empty()) std::printf("%s\n", zero_note(config).c_str());
    std::printf("%s\n", plan.why.c_str());
    for (const std::string& c : changes) std::printf("resume: changed (allowed) %s\n", c.c_str());
    if (!moved_metrics.empty())
      std::printf("metrics: earlier lines %s moved to %s\n",
                  plan.resume_from.empty() ? "of another run" : "past the resumed step", moved_metrics.c_str());
  }

  // ---- model, data, checkpoint ----
  ModelSession session;
  agree_on([&] { session = build_session(config, ModelComms::from(grid), device, /*with_optimizer=*/true); },
           kExitFailure);
  Model& model = *session.model;
  AdamW& optimizer = *session.optimizer;
  std::unique_ptr<DataLoader> loader, eval_loader;
  EvalPlan eval_plan;
  std::string eot_warning;
  int64_t start_step = 0;
  std::string hf_source;  // carried into every checkpoint's metadata
  agree_on([&] {
    const LoaderRank lrank = loader_rank(config, grid);
    loader = std::make_unique<PrefetchLoader>(make_loader(config, lrank, "train"));  // one batch ahead
    if (tc.eval_every > 0) {
      eval_loader = make_loader(config, lrank, "eval");
      eval_plan = plan_eval(config, *eval_loader);
    }
    if (rank0) eot_warning = eot_absence_warning(config, kEotCheckSamples);
  }, kExitUsage);
  if (rank0 && eval_loader)
    std::printf("eval every %d steps: %s; a window of %d tokens gives %d next-token targets\n", tc.eval_every,
                eval_plan.text().c_str(), config.data.seq_len, config.data.seq_len - 1);
  if (rank0 && !eot_warning.empty()) std::printf("%s\n", eot_warning.c_str());
  if (!plan.resume_from.empty()) {  // checkpoint.resume wins over train.init_from: a resumed run continues
    TrainState peek;
    agree_on([&] {
      read_checkpoint_state(plan.resume_from, &peek);
      RT_CHECK(peek.config_hash.empty() || peek.config_hash == model_config_hash(config),
               "checkpoint " << plan.resume_from << " was written for a different model config; resume with the "
                             << "same model.*");
    }, kExitUsage);
    std::map<std::string, std::string> meta;
    TrainState resumed;
    // Collective; a missing, mismatched or corrupted file fails on every rank alike (the sums are all-reduced
    // before they are judged): the checkpoint's error, printed once.
    agree_on([&] { resumed = load_into(session, plan.resume_from, grid.world(), &meta); }, kExitUsage);
    start_step = resumed.step;
    loader->set_cursor(resumed.data_cursor);
    if (auto it = meta.find("hf_source"); it != meta.end()) hf_source = it->second;
  } else if (!tc.init_from.empty()) {  // weights from the source, fresh optimizer, step 0
    ModelSource source;
    std::vector<HostTensor> weights;
    agree_on([&] {
      source = read_model_source(tc.init_from);
      weights = load_source_weights(source);
    }, kExitUsage);
    model.scatter_full(model.master(), weights, "");
    model.sync_compute_weights();
    optimizer.zero_state();
    hf_source = source.hf_source;
    if (rank0)
      std::printf("initialised from %s (%s), fresh optimizer at step 0; RoPE base %g, scaling %s\n",
                  tc.init_from.c_str(), source.is_hf ? "Hugging Face model" : "ringtrain checkpoint",
                  double(config.model.rope_base), rope_scaling_text(config.model.rope_scaling).c_str());
  }
  if (plan.resume_from.empty() && tc.init_from.empty()) {
    model.init_weights(tc.seed);
    optimizer.zero_state();
  } else if (rank0 && !plan.resume_from.empty()) {  // (init_from said so above)
    std::printf("resumed from %s at step %lld\n", plan.resume_from.c_str(), (long long)start_step);
  }
  const std::map<std::string, std::string> metadata = run_metadata(config, hf_source);

  const FlopsModel flops = flops_model(config);
  const double peak = peak_tflops(config, device);
  const int devices = grid.dims().world();
  const double tokens_per_step = double(tc.batch_size) * config.data.seq_len;
  // Packed documents: MFU counts the visible (query, key) pairs of the steps it is measured over.
  const bool documents = config.data.documents == "eot";
  double interval_pairs = 0;  // this rank's query rows' visible pairs since interval_start
  if (rank0) {
    std::printf("parameters %lld | memory per rank %s (arena) | tokens/step %.0f\n",
                (long long)count_parameters(config.model), format_bytes(double(session.arena->capacity())).c_str(),
                tokens_per_step);
    if (documents)
      std::printf("MFU = (%s) / step time / (%.0f TFLOP/s * %d devices)%s\n", flops.documents_formula().c_str(), peak,
                  devices, peak > 0 ? "" : "  [no peak for this device: set log.peak_tflops to report MFU]");
    else
      std::printf("MFU = %s * tok/s / (%.0f TFLOP/s * %d devices)%s\n", flops.formula().c_str(), peak, devices,
                  peak > 0 ? "" : "  [no peak for this device: set log.peak_tflops to report MFU]");
  }
  // The file holds only the steps up to the resumed one (plan above), so appending never duplicates a step.
  std::unique_ptr<MetricsWriter> metrics;
  if (rank0) metrics = std::make_unique<MetricsWriter>(metrics_path(config), /*append=*/true);

  DivergenceGuard guard(tc, config.optim);
  // Reads the guard's device count (every rank: they all see the same all-reduced values and decide alike).
  auto guard_check = [&](int64_t step, double loss) -> bool {
    const GuardVerdict v = guard.check(step, optimizer.skipped_steps(), loss, optimizer.last_grad_norm());
    if (v.stop) {
      if (rank0) report_error_line("ringtrain: error: " + v.message);
      return true;
    }
    if (rank0 && !v.message.empty()) std::printf("warning: %s\n", v.message.c_str());
    return false;
  };

  using clock = std::chrono::steady_clock;
  const auto run_start = clock::now();
  auto interval_start = run_start;  // since the host last waited for the GPU (logging, eval, checkpoint)
  int64_t interval_steps = 0;
  int64_t step = start_step;
  int64_t guarded_step = start_step;  // the latest step the guard has checked
  bool warned_no_targets = false, warned_eval_no_targets = false;  // each said once
  bool said_ring_bytes = false;  // the first batch's ring order and bytes, said once
  while (step < tc.steps) {
    const Batch batch = loader->next();
    model.attention().reset_timings();  // this step's ring attention time, all layers, forward + backward
    model.reset_zero_stats();
    ++step;
    watchdog_set_phase("step " + std::to_string(step), /*saving=*/false);
    const float lr = learning_rate(config.optim, step, tc.steps);
    const double step_targets = train_step(model, optimizer, batch, step, lr);
    if (step_targets == 0 && !warned_no_targets && rank0) {
      std::printf("warning: step %lld has no targets: %s; its loss is not reported (null in metrics.jsonl) and its "
                  "gradient is zero. Said once; later such steps show \"no targets\" on their log line\n",
                  (long long)step, no_targets_reason(config).c_str());
      warned_no_targets = true;
    }
    if (documents && !said_ring_bytes) {
      if (rank0) print_ring_bytes_line(model.attention().ring(), batch);
      said_ring_bytes = true;
    }
    ++interval_steps;
    interval_pairs += batch.visible_pairs;
    bool waited = false;  // whether the host has waited for the GPU in this iteration

    if (step % std::max(1, config.log.every) == 0 || step == tc.steps) {
      const LossTally tally = step_losses(model, batch);  // every rank (collective); waits for the step
      waited = true;
      if (guard_check(step, tally.mean(0))) return kExitDivergence;
      guarded_step = step;
      const double seconds = std::chrono::duration<double>(clock::now() - interval_start).count() /
                             double(interval_steps);
      double pairs_per_step = 0;  // global visible pairs per step (documents); collective over dp x cp
      if (documents) {
        double pairs = interval_pairs;
        model.dp_cp_comm().all_reduce_sum(&pairs, 1);
        pairs_per_step = pairs / double(interval_steps);
      }
      if (rank0) {
        StepMetrics sm;
        sm.step = step, sm.total_steps = tc.steps;
        sm.loss = tally.mean(0);  // NaN (null) when the step had no target
        sm.no_targets = tally.no_targets();
        sm.group_losses = tally.group_means();
        sm.lr = lr, sm.grad_norm = optimizer.last_grad_norm();
        sm.tok_per_s = tokens_per_step / seconds;
        if (documents)
          sm.mfu = peak > 0 ? mfu_of_rate(flops.per_step(tokens_per_step, pairs_per_step) / seconds, peak, devices)
                            : NAN;
        else
          sm.mfu = peak > 0 ? mfu(flops, sm.tok_per_s, peak, devices) : NAN;
        sm.ms_per_step = seconds * 1e3;
        // Measured, not planned: `ringtrain plan` predicts the arena, and this checks the prediction.
        sm.peak_mem_bytes = int64_t(measured_memory_bytes(session.arena->device()));
        sm.extra["arena_bytes"] = double(session.arena->capacity());
        const double elapsed = std::chrono::duration<double>(clock::now() - run_start).count();
        sm.eta_s = elapsed / double(step - start_step) * double(tc.steps - step);
        sm.extra["tok_per_s_per_device"] = sm.tok_per_s / devices;
        if (guard.skipped() > 0) sm.extra["skipped_steps"] = double(guard.skipped());
        if (documents) {  // the logged step's targets in the loss, the boundary targets left out of it
          sm.extra["targets"] = tally.count[0];
          sm.extra["boundary_targets_dropped"] = tally.boundary_dropped;
          sm.extra["visible_pairs_per_step"] = pairs_per_step;
          if (config.parallel.ring() > 1)  // the scheme rank 0's ring ran the logged step with (parallel.cp_scheme)
            sm.extra["cp_scheme_gather"] = model.attention().ring().scheme() == CpScheme::gather ? 1.0 : 0.0;
        }
        // Rank 0's time inside ring attention, and the part of it blocked waiting for the ring (exposed comm).
        const RingTimings& ring = model.attention().timings();
        sm.extra["attn_ms"] = ring.total_s() * 1e3;
        sm.extra["comm_exposed_ms"] = ring.exposed_comm_s * 1e3;
        if (config.parallel.cp_a2a > 1) sm.extra["a2a_exposed_ms"] = ring.exposed_a2a_s * 1e3;
        if (ring.ring_bytes > 0) {  // rank 0's K/V and dK/dV hops in the logged step's ring calls, per layer; the plain ring's
          sm.extra["ring_sent_bytes_per_layer"] = ring.sent_bytes / double(model.shape().L);
          sm.extra["ring_full_bytes_per_layer"] = ring.ring_bytes / double(model.shape().L);
        }
        if (model.zero() > 0) {  // the latest step's ZeRO gathers and reduce-scatters (host time in their calls)
          const Model::ZeroStats& z = model.zero_stats();
          sm.extra["zero_comm_ms"] = z.host_s * 1e3;
          sm.extra["zero_gathered_gib"] = z.gathered_bytes / double(1 << 30);
          sm.extra["zero_scattered_gib"] = z.scattered_bytes / double(1 << 30);
        }
        std::string line = format_step_line(sm);
        if (guard.skipped() > 0) line += " | skipped " + std::to_string(guard.skipped());
        if (documents) line += targets_text(tally);
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        metrics->write(sm);
      }
    }

    if (eval_loader && (step % tc.eval_every == 0 || step == tc.steps)) {
      const LossTally ev = evaluate(model, *eval_loader, eval_plan);
      waited = true;
      if (rank0) {
        if (ev.no_targets() && !warned_eval_no_targets) {
          std::printf("warning: eval at step %lld has no targets: %s; eval_loss is not reported (null in "
                      "metrics.jsonl). Said once\n", (long long)step, no_targets_reason(config).c_str());
          warned_eval_no_targets = true;
        }
        std::printf("eval step %lld | loss %s%s%s | %s\n", (long long)step, loss_text(ev).c_str(),
                    halves_text(ev).c_str(), documents ? targets_text(ev).c_str() : "", eval_plan.text().c_str());
        nlohmann::json j = {{"step", step}, {"eval_loss", ev.no_targets() ? nlohmann::json(nullptr)
                                                                          : nlohmann::json(ev.mean(0))}};
        j["eval_windows"] = eval_plan.windows, j["eval_tokens"] = double(eval_plan.windows) * config.data.seq_len;
        if (documents) j["eval_targets"] = ev.count[0], j["eval_boundary_targets_dropped"] = ev.boundary_dropped;
        for (const auto& [name, mean] : ev.group_means()) j["eval_loss_" + name] = mean;
        metrics->write_json_line(j.dump());
      }
    }

    // Every rank must agree to stop at the same step: a signal may reach the ranks at different times.
    double stop[2] = {g_stop_signal.load() != 0 ? 1.0 : 0.0, double(g_stop_signal.load())};
    grid.world().all_reduce_sum(stop, 2);
    const int signal = stop[0] > 0 ? int(stop[1] / stop[0] + 0.5) : 0;
    const bool periodic = config.checkpoint.every > 0 && step % config.checkpoint.every == 0;
    if (periodic || signal > 0 || (step == tc.steps && config.checkpoint.save_final)) {
      if (guarded_step != step) {  // never save a state the guard has not seen
        const LossTally tally = step_losses(model, batch);
        if (guard_check(step, tally.mean(0))) return kExitDivergence;
        guarded_step = step;
      }
      if (rank0 && signal > 0) std::printf("signal %d: saving step %lld, then stopping\n", signal, (long long)step);
      std::fflush(stdout);
      const std::string dir = save(config, target, session, *loader, step, grid.world(), metadata);
      waited = true;
      if (rank0) std::printf("saved checkpoint %s\n", dir.c_str());
    }
    if (signal > 0 && step < tc.steps) {
      if (rank0)
        std::printf("stopped at step %lld on signal %d after a complete save; continue with "
                    "--set checkpoint.resume=auto\n", (long long)step, signal);
      std::fflush(stdout);
      return 128 + signal;
    }
    if (waited) interval_start = clock::now(), interval_steps = 0, interval_pairs = 0;
  }
  return kExitOk;
}

}  // namespace rt
