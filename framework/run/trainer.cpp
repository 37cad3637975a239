// train_main (framework/run/trainer.h): the training loop around Model and AdamW.
//
// Start-up, each part agreed on by every rank (framework/base/run_errors.h: an error is printed once, exit 2):
//   every auto resolved in one step (framework/plan/resolve.h) -> the process grid -> rank 0 locks run_dir
//   (framework/run/run_dir.h) -> every rank plans the start (fresh / continue / branch, framework/run/resume_plan.h)
//   and reconciles the config with the checkpoint -> rank 0 writes run.json, config.yaml and de-duplicates
//   metrics.jsonl -> model, loaders, checkpoint.
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
#include "framework/plan/mfu.h"
#include "framework/plan/resolve.h"
#include "framework/plan/trainer_setup.h"
#include "framework/run/divergence_guard.h"
#include "framework/run/metrics.h"
#include "framework/run/precision_report.h"
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

// ---- start-up ----

// The run directory, settled by every rank alike: rank 0 owns it (the lock), every rank plans the start (fresh /
// continue / branch) and reconciles the config with the checkpoint, rank 0 writes run.json and config.yaml and sets
// metrics.jsonl's later lines aside.
struct RunStart {
  std::unique_ptr<RunDirLock> lock;  // rank 0, for the whole run
  RunPlan plan;
  std::vector<std::string> changes;  // resume: the config's allowed changes
  std::string moved_metrics;         // where earlier metrics lines went ("" = none)
  std::string moved_events;          // a fresh run: where an earlier run's TensorBoard files went ("" = none)
  SaveTarget target;
};

RunStart open_run_dir(Config& config, bool rank0, int world_size) {
  RunStart s;
  const TrainConfig& tc = config.train;
  agree_on([&] { if (rank0) s.lock = std::make_unique<RunDirLock>(tc.run_dir); }, kExitUsage);
  int64_t resumed_step = 0;
  agree_on([&] {
    s.plan = plan_run(config);
    if (!s.plan.resume_from.empty()) {
      s.changes = reconcile_resume_config(config, s.plan.resume_from, world_size);
      resumed_step = read_checkpoint_state(s.plan.resume_from).step;
    }
  }, kExitUsage);
  agree_on([&] {
    if (!rank0) return;
    remove_checkpoints(s.plan.wipe);
    prepare_run_dir(config);
    if (s.plan.write_record) write_run_record(tc.run_dir, {s.plan.lineage, s.plan.parent});
    const std::string metrics_file = metrics_path(config);
    s.moved_metrics = s.plan.resume_from.empty() ? move_metrics_aside(metrics_file)
                                                 : move_metrics_after(metrics_file, resumed_step);
    // A resumed run appends its own event file (TensorBoard drops the earlier files' steps past the resumed one).
    if (s.plan.resume_from.empty() && config.log.tensorboard) s.moved_events = move_tensorboard_aside(tc.run_dir);
  }, kExitUsage);
  s.target = SaveTarget{lineage_dir(tc.run_dir, s.plan.lineage), s.plan.lineage, s.plan.parent, s.plan.resume_from};
  return s;
}

// Rank 0's start-up lines: the config table, its notes, the one table of what each auto resolved to (stderr,
// framework/plan/resolve.h), the grid, and how the run starts.
void print_start(const Config& config, const Resolved& resolved, const RunStart& start) {
  std::printf("%s", config_table(config).c_str());
  for (const std::string& note : config.notes) std::printf("%s\n", note.c_str());
  std::fflush(stdout);
  print_resolved(resolved);
  const ParallelConfig& p = config.parallel;
  const std::string hybrid =
      p.cp_a2a > 1 ? " (ring " + std::to_string(p.ring()) + " x a2a " + std::to_string(p.cp_a2a) + ")" : "";
  const std::string scheme = config.data.documents == "eot" && p.ring() > 1
                                 ? " cp_scheme=" + std::string(cp_scheme_setting_name(p.cp_scheme))
                                 : "";
  std::printf("cp=%d%s layout=%s%s tp=%d dp=%d device=%s\n", p.cp, hybrid.c_str(), resolved_layout(config).c_str(),
              scheme.c_str(), p.tp, p.dp, device_name(resolved.device).c_str());
  if (!zero_note(config).empty()) std::printf("%s\n", zero_note(config).c_str());
  std::printf("%s\n", start.plan.why.c_str());
  for (const std::string& c : start.changes) std::printf("resume: changed (allowed) %s\n", c.c_str());
  if (!start.moved_metrics.empty())
    std::printf("metrics: earlier lines %s moved to %s\n",
                start.plan.resume_from.empty() ? "of another run" : "past the resumed step",
                start.moved_metrics.c_str());
  if (!start.moved_events.empty())
    std::printf("tensorboard: event files of another run moved to %s\n", start.moved_events.c_str());
}

// The training and held-out loaders (every rank), with rank 0's eval line and the missing-EOT warning.
struct Loaders {
  std::unique_ptr<DataLoader> train, eval;  // eval: null when train.eval_every is 0
  EvalPlan eval_plan;
};

Loaders open_loaders(const Config& config, const ProcessGrid& grid, bool rank0) {
  Loaders l;
  std::string eot_warning;
  agree_on([&] {
    const LoaderRank lrank = loader_rank(config, grid);
    l.train = std::make_unique<PrefetchLoader>(make_loader(config, lrank, "train"));  // one batch ahead
    if (config.train.eval_every > 0) {
      l.eval = make_loader(config, lrank, "eval");
      l.eval_plan = plan_eval(config, *l.eval);
    }
    if (rank0) eot_warning = eot_absence_warning(config, kEotCheckSamples);
  }, kExitUsage);
  if (rank0 && l.eval)
    std::printf("eval every %d steps: %s; a window of %d tokens gives %d next-token targets\n",
                config.train.eval_every, l.eval_plan.text().c_str(), config.data.seq_len, config.data.seq_len - 1);
  if (rank0 && !eot_warning.empty()) std::printf("%s\n", eot_warning.c_str());
  return l;
}

// The weights and optimizer state the run starts from: the resumed checkpoint (checkpoint.resume wins over
// train.init_from: a resumed run continues), train.init_from (fresh optimizer, step 0), or a fresh init. Returns the
// step to continue from; hf_source: the Hugging Face directory the weights first came from (carried into every
// checkpoint's metadata).
int64_t start_weights(const Config& config, const RunPlan& plan, ModelSession& session, DataLoader& loader,
                      Comm& world, bool rank0, std::string* hf_source) {
  const TrainConfig& tc = config.train;
  Model& model = *session.model;
  AdamW& optimizer = *session.optimizer;
  if (!plan.resume_from.empty()) {
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
    agree_on([&] { resumed = load_into(session, plan.resume_from, world, &meta); }, kExitUsage);
    loader.set_cursor(resumed.data_cursor);
    if (auto it = meta.find("hf_source"); it != meta.end()) *hf_source = it->second;
    if (rank0) std::printf("resumed from %s at step %lld\n", plan.resume_from.c_str(), (long long)resumed.step);
    return resumed.step;
  }
  if (tc.init_from.empty()) {
    model.init_weights(tc.seed);
    optimizer.zero_state();
    return 0;
  }
  ModelSource source;
  std::vector<HostTensor> weights;
  agree_on([&] {
    source = read_model_source(tc.init_from);
    weights = load_source_weights(source);
  }, kExitUsage);
  model.scatter_full(model.master(), weights, "");
  model.sync_compute_weights();
  optimizer.zero_state();
  *hf_source = source.hf_source;
  if (rank0)
    std::printf("initialised from %s (%s), fresh optimizer at step 0; RoPE base %g, scaling %s\n",
                tc.init_from.c_str(), source.is_hf ? "Hugging Face model" : "ringtrain checkpoint",
                double(config.model.rope_base), rope_scaling_text(config.model.rope_scaling).c_str());
  return 0;
}

// ---- the loop ----

// One training run after start-up: the steps, their log lines and metrics, evals, saves and stops. Every rank runs
// it; rank 0 prints and writes files.
class TrainLoop {
 public:
  TrainLoop(const Config& config, Device device, ProcessGrid& grid, ModelSession& session, Loaders& loaders,
            const SaveTarget& target, std::map<std::string, std::string> metadata)
      : config_(config), tc_(config.train), grid_(grid), session_(session), model_(*session.model),
        optimizer_(*session.optimizer), loaders_(loaders), target_(target), metadata_(std::move(metadata)),
        rank0_(grid.world().rank() == 0), documents_(config.data.documents == "eot"), flops_(flops_model(config)),
        peak_(peak_tflops(config, device)), fp8_peak_(fp8_peak_tflops(config, device)), device_(device),
        devices_(grid.dims().world()),
        tokens_per_step_(double(tc_.batch_size) * config.data.seq_len), guard_(tc_, config.optim) {}

  // Returns the exit code: 0 at the last step, 3 on divergence, 128 + N when stopped by signal N after a save.
  int run(int64_t start_step) {
    print_header();
    // The file holds only the steps up to the resumed one (open_run_dir), so appending never duplicates a step.
    if (rank0_) metrics_ = std::make_unique<MetricsWriter>(metrics_path(config_), /*append=*/true);
    if (rank0_ && config_.log.tensorboard) {  // the same lines as event files, written by rank 0 alone
      if (tensorboard_built()) {
        const std::string events_dir = tensorboard_dir(tc_.run_dir);
        metrics_->attach_tensorboard(std::make_unique<TensorBoardWriter>(events_dir, start_step + 1));
        std::printf("tensorboard: %s (watch: tensorboard --logdir %s)\n", metrics_->tensorboard()->path().c_str(),
                    tc_.run_dir.c_str());
      } else {
        std::printf("%s\n", tensorboard_off_line().c_str());
      }
    }
    start_step_ = start_step;
    guarded_step_ = start_step;
    run_start_ = interval_start_ = clock::now();
    for (int64_t step = start_step; step < tc_.steps;) {
      const Batch batch = loaders_.train->next();
      model_.attention().reset_timings();  // this step's ring attention time, all layers, forward + backward
      model_.reset_zero_stats();
      ++step;
      watchdog_set_phase("step " + std::to_string(step), /*saving=*/false);
      const float lr = learning_rate(config_.optim, step, tc_.steps);
      const double step_targets = train_step(model_, optimizer_, batch, step, lr);
      say_once_after_step(step, step_targets, batch);
      ++interval_steps_;
      interval_pairs_ += batch.visible_pairs;
      bool waited = false;  // whether the host has waited for the GPU in this iteration
      if (step % std::max(1, config_.log.every) == 0 || step == tc_.steps) {
        if (!log_step(step, lr, batch)) return kExitDivergence;
        waited = true;
      }
      if (loaders_.eval && (step % tc_.eval_every == 0 || step == tc_.steps)) {
        eval_step(step);
        waited = true;
      }
      const int code = save_or_stop(step, batch, &waited);
      if (code >= 0) return code;
      if (waited) interval_start_ = clock::now(), interval_steps_ = 0, interval_pairs_ = 0;
    }
    return kExitOk;
  }

 private:
  using clock = std::chrono::steady_clock;

  void print_header() const {
    if (!rank0_) return;
    std::printf("parameters %lld | memory per rank %s (arena) | tokens/step %.0f\n",
                (long long)count_parameters(config_.model), format_bytes(double(session_.arena->capacity())).c_str(),
                tokens_per_step_);
    const char* no_peak = peak_ > 0 ? "" : "  [no peak for this device: set log.peak_tflops to report MFU]";
    // Packed documents: MFU counts the visible (query, key) pairs of the steps it is measured over.
    if (documents_)
      std::printf("MFU = (%s) / step time / (%.0f TFLOP/s * %d devices)%s\n", flops_.documents_formula().c_str(),
                  peak_, devices_, no_peak);
    else
      std::printf("MFU = %s * tok/s / (%.0f TFLOP/s * %d devices)%s\n", flops_.formula().c_str(), peak_, devices_,
                  no_peak);
    std::printf("%s\n", precision_line(config_, device_, peak_).c_str());
  }

  // A step without targets, and the first batch's ring order and bytes (documents): each said once.
  void say_once_after_step(int64_t step, double step_targets, const Batch& batch) {
    if (step_targets == 0 && !warned_no_targets_ && rank0_) {
      std::printf("warning: step %lld has no targets: %s; its loss is not reported (null in metrics.jsonl) and its "
                  "gradient is zero. Said once; later such steps show \"no targets\" on their log line\n",
                  (long long)step, no_targets_reason(config_).c_str());
      warned_no_targets_ = true;
    }
    if (documents_ && !said_ring_bytes_) {
      if (rank0_) print_ring_bytes_line(model_.attention().ring(), batch);
      said_ring_bytes_ = true;
    }
  }

  // Reads the guard's device count (every rank: they all see the same all-reduced values and decide alike).
  // false: diverged (said by rank 0).
  bool guard_passes(int64_t step, double loss) {
    GuardVerdict v = guard_.check(step, optimizer_.skipped_steps(), loss, optimizer_.last_grad_norm());
    if (config_.train.precision == "fp8") {  // an FP8 factor that was not finite: its verdict names the layer
      const GuardVerdict f = guard_.check_fp8(step, model_.take_fp8_bad_factors(grid_.world()));
      if (!f.message.empty()) v = {v.stop || f.stop, f.message + (v.message.empty() ? "" : ". Also: " + v.message)};
    }
    if (v.stop) {
      if (rank0_) report_error_line("ringtrain: error: " + v.message);
      return false;
    }
    if (rank0_ && !v.message.empty()) std::printf("warning: %s\n", v.message.c_str());
    guarded_step_ = step;
    return true;
  }

  // A logging point: the step's losses (collective; waits for the step), the guard, and rank 0's line and metrics.
  // false: diverged.
  bool log_step(int64_t step, float lr, const Batch& batch) {
    const LossTally tally = step_losses(model_, batch);
    // The gather forward's ready flags (issue 46): a wait for gathered rows that timed out raises here, naming the
    // rank and the layer (the step has been waited for: the fault word is read, no new wait).
    model_.attention().ring().check_ready_fault("step " + std::to_string(step));
    if (!guard_passes(step, tally.mean(0))) return false;
    const double seconds = std::chrono::duration<double>(clock::now() - interval_start_).count() /
                           double(interval_steps_);
    double pairs_per_step = 0;  // global visible pairs per step (documents); collective over dp x cp
    if (documents_) {
      double pairs = interval_pairs_;
      model_.dp_cp_comm().all_reduce_sum(&pairs, 1);
      pairs_per_step = pairs / double(interval_steps_);
    }
    if (!rank0_) return true;
    const StepMetrics sm = step_metrics(step, lr, tally, seconds, pairs_per_step);
    std::string line = format_step_line(sm);
    if (guard_.skipped() > 0) line += " | skipped " + std::to_string(guard_.skipped());
    if (documents_) line += targets_text(tally);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    metrics_->write(sm);
    return true;
  }

  StepMetrics step_metrics(int64_t step, float lr, const LossTally& tally, double seconds, double pairs_per_step) {
    StepMetrics sm;
    sm.step = step, sm.total_steps = tc_.steps;
    sm.loss = tally.mean(0);  // NaN (null) when the step had no target
    sm.no_targets = tally.no_targets();
    sm.group_losses = tally.group_means();
    sm.lr = lr, sm.grad_norm = optimizer_.last_grad_norm();
    sm.tok_per_s = tokens_per_step_ / seconds;
    if (documents_)
      sm.mfu = peak_ > 0 ? mfu_of_rate(flops_.per_step(tokens_per_step_, pairs_per_step) / seconds, peak_, devices_)
                         : NAN;
    else
      sm.mfu = peak_ > 0 ? mfu(flops_, sm.tok_per_s, peak_, devices_) : NAN;
    sm.ms_per_step = seconds * 1e3;
    sm.labels["precision"] = config_.train.precision;  // and fp8's recipe: every line says what it ran in
    if (config_.train.precision == "fp8") sm.labels["fp8_recipe"] = config_.fp8.recipe;
    if (fp8_peak_ > 0 && std::isfinite(sm.mfu)) sm.extra["mfu_fp8_peak"] = sm.mfu * peak_ / fp8_peak_;
    // Measured, not planned: `ringtrain plan` predicts the arena, and this checks the prediction.
    sm.peak_mem_bytes = int64_t(measured_memory_bytes(session_.arena->device()));
    sm.extra["arena_bytes"] = double(session_.arena->capacity());
    const double elapsed = std::chrono::duration<double>(clock::now() - run_start_).count();
    sm.eta_s = elapsed / double(step - start_step_) * double(tc_.steps - step);
    sm.extra["tok_per_s_per_device"] = sm.tok_per_s / devices_;
    if (guard_.skipped() > 0) sm.extra["skipped_steps"] = double(guard_.skipped());
    if (documents_) {  // the logged step's targets in the loss, the boundary targets left out of it
      sm.extra["targets"] = tally.count[0];
      sm.extra["boundary_targets_dropped"] = tally.boundary_dropped;
      sm.extra["visible_pairs_per_step"] = pairs_per_step;
      if (config_.parallel.ring() > 1)  // the scheme rank 0's ring ran the logged step with (parallel.cp_scheme)
        sm.extra["cp_scheme_gather"] = model_.attention().ring().scheme() == CpScheme::gather ? 1.0 : 0.0;
    }
    // Rank 0's time inside ring attention, and the part of it blocked waiting for the ring (exposed comm).
    const RingTimings& ring = model_.attention().timings();
    sm.extra["attn_ms"] = ring.total_s() * 1e3;
    sm.extra["comm_exposed_ms"] = ring.exposed_comm_s * 1e3;
    if (config_.parallel.cp_a2a > 1) sm.extra["a2a_exposed_ms"] = ring.exposed_a2a_s * 1e3;
    // Rank 0's K/V and dK/dV hops in the logged step's ring calls, per layer; the full ring's.
    if (ring.ring_bytes > 0) {
      sm.extra["ring_sent_bytes_per_layer"] = ring.sent_bytes / double(model_.shape().L);
      sm.extra["ring_full_bytes_per_layer"] = ring.ring_bytes / double(model_.shape().L);
    }
    if (model_.zero() > 0) {  // the latest step's ZeRO gathers and reduce-scatters (host time in their calls)
      const Model::ZeroStats& z = model_.zero_stats();
      sm.extra["zero_comm_ms"] = z.host_s * 1e3;
      sm.extra["zero_gathered_gib"] = z.gathered_bytes / double(1 << 30);
      sm.extra["zero_scattered_gib"] = z.scattered_bytes / double(1 << 30);
      if (z.fp8_code_bytes > 0)  // fp8.zero3_gather: fp8: the E4M3 codes among the gathered bytes
        sm.extra["zero_fp8_code_gib"] = z.fp8_code_bytes / double(1 << 30);
    }
    return sm;
  }

  void eval_step(int64_t step) {
    const LossTally ev = evaluate(model_, *loaders_.eval, loaders_.eval_plan);
    if (!rank0_) return;
    if (ev.no_targets() && !warned_eval_no_targets_) {
      std::printf("warning: eval at step %lld has no targets: %s; eval_loss is not reported (null in "
                  "metrics.jsonl). Said once\n", (long long)step, no_targets_reason(config_).c_str());
      warned_eval_no_targets_ = true;
    }
    const EvalPlan& plan = loaders_.eval_plan;
    std::printf("eval step %lld | loss %s%s%s | %s\n", (long long)step, loss_text(ev).c_str(), halves_text(ev).c_str(),
                documents_ ? targets_text(ev).c_str() : "", plan.text().c_str());
    nlohmann::json j = {{"step", step}, {"eval_loss", ev.no_targets() ? nlohmann::json(nullptr)
                                                                      : nlohmann::json(ev.mean(0))}};
    j["eval_windows"] = plan.windows, j["eval_tokens"] = double(plan.windows) * config_.data.seq_len;
    if (documents_) j["eval_targets"] = ev.count[0], j["eval_boundary_targets_dropped"] = ev.boundary_dropped;
    for (const auto& [name, mean] : ev.group_means()) j["eval_loss_" + name] = mean;
    metrics_->write_json_line(j.dump());
  }

  // Saves when due (periodic, the last step, or a stop signal) and stops after a signal's save. Every rank must
  // agree to stop at the same step: a signal may reach the ranks at different times. Returns the exit code to
  // stop with, or -1 to go on.
  int save_or_stop(int64_t step, const Batch& batch, bool* waited) {
    double stop[2] = {g_stop_signal.load() != 0 ? 1.0 : 0.0, double(g_stop_signal.load())};
    grid_.world().all_reduce_sum(stop, 2);
    const int signal = stop[0] > 0 ? int(stop[1] / stop[0] + 0.5) : 0;
    const bool periodic = config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0;
    if (periodic || signal > 0 || (step == tc_.steps && config_.checkpoint.save_final)) {
      if (guarded_step_ != step && !guard_passes(step, step_losses(model_, batch).mean(0)))
        return kExitDivergence;  // never save a state the guard has not seen
      if (rank0_ && signal > 0) std::printf("signal %d: saving step %lld, then stopping\n", signal, (long long)step);
      std::fflush(stdout);
      const std::string dir = save(config_, target_, session_, *loaders_.train, step, grid_.world(), metadata_);
      *waited = true;
      if (rank0_) std::printf("saved checkpoint %s\n", dir.c_str());
    }
    if (signal > 0 && step < tc_.steps) {
      if (rank0_)
        std::printf("stopped at step %lld on signal %d after a complete save; continue with "
                    "--set checkpoint.resume=auto\n", (long long)step, signal);
      std::fflush(stdout);
      return 128 + signal;
    }
    return -1;
  }

  const Config& config_;
  const TrainConfig& tc_;
  ProcessGrid& grid_;
  ModelSession& session_;
  Model& model_;
  AdamW& optimizer_;
  Loaders& loaders_;
  const SaveTarget& target_;
  const std::map<std::string, std::string> metadata_;
  const bool rank0_, documents_;
  const FlopsModel flops_;
  const double peak_;
  const double fp8_peak_;  // train.precision: fp8: the FP8 peak MFU is also shown against (0: none)
  const Device device_;
  const int devices_;
  const double tokens_per_step_;
  DivergenceGuard guard_;
  std::unique_ptr<MetricsWriter> metrics_;  // rank 0
  clock::time_point run_start_, interval_start_;  // interval: since the host last waited for the GPU
  int64_t start_step_ = 0, guarded_step_ = 0;     // guarded: the latest step the guard has checked
  int64_t interval_steps_ = 0;
  double interval_pairs_ = 0;  // this rank's query rows' visible pairs since interval_start_
  bool warned_no_targets_ = false, warned_eval_no_targets_ = false, said_ring_bytes_ = false;  // each said once
};

}  // namespace

int train_main(const Config& loaded) {
  const StopSignals signals;  // from the start: a signal during set-up stops after the first step
  Resolved resolved;  // every auto, in one place (framework/plan/resolve.h); device: cuda without a GPU is the
                      // config's error, found by every rank alike
  agree_on([&] { resolved = resolve_autos(loaded, Purpose::train); }, kExitUsage);
  Config config = resolved.config;
  ProcessGrid grid = make_process_grid(config, resolved.device);
  const bool rank0 = grid.world().rank() == 0;
  const RunStart start = open_run_dir(config, rank0, grid.dims().world());
  if (rank0) print_start(config, resolved, start);
  ModelSession session;
  agree_on([&] { session = build_session(config, ModelComms::from(grid), resolved.device, /*with_optimizer=*/true); },
           kExitFailure);
  Loaders loaders = open_loaders(config, grid, rank0);
  std::string hf_source;
  const int64_t start_step =
      start_weights(config, start.plan, session, *loaders.train, grid.world(), rank0, &hf_source);
  TrainLoop loop(config, resolved.device, grid, session, loaders, start.target, run_metadata(config, hf_source));
  return loop.run(start_step);
}

}  // namespace rt
