// train_main and eval_main (framework/trainer.h): the training loop around Model and AdamW.
//
// One step: next batch -> train_step (framework/train_step.h: global target count (dp x cp) -> forward +
// fused loss + backward -> gradient all-reduce over dp x cp (one call on the flat buffer) -> shared-KV
// reduction over tp (GQA with n_kv_head < tp) -> clip + AdamW) -> log. Losses are global token sums /
// global token counts. Rank 0 prints and writes files; every rank computes.
// On CUDA the host waits for the GPU only at a logging point (log.every, and the last step): the losses,
// the grad norm and the ring timings are fetched there; other steps only queue work. Time per step is so
// measured over the steps since the previous logging point (or eval / checkpoint, which also wait).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/checkpoint.h"
#include "framework/dump_logits.h"
#include "framework/init_from.h"
#include "framework/metrics.h"
#include "framework/mfu.h"
#include "framework/rope_scaling.h"
#include "framework/train_step.h"
#include "framework/trainer.h"
#include "framework/trainer_setup.h"
#include "kernels/device_memory.h"
#include "kernels/ops.h"

namespace rt {

namespace {

std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int signal) { g_stop_signal.store(signal); }

std::string halves_text(const LossTally& t) {  // the data source's loss groups, e.g. the copy task's halves
  std::string text;
  for (const auto& [name, mean] : t.group_means()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s%s %.4f", text.empty() ? " (" : ", ", name.c_str(), mean);
    text += buf;
  }
  return text.empty() ? text : text + ")";
}

// Mean per-token loss over the first `batches` held-out batches (the same batches every time).
LossTally evaluate(Model& model, DataLoader& eval_loader, int batches) {
  eval_loader.set_cursor(0);
  LossTally tally;
  for (int b = 0; b < batches; ++b) {
    const Batch batch = eval_loader.next();
    const double count = model.global_target_count(batch);
    tally.add(batch, model.step(batch, count, /*want_grad=*/false));
  }
  tally.all_reduce(model.dp_cp_comm());
  return tally;
}

std::string format_bytes(double bytes) {
  char buf[32];
  if (bytes >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  return buf;
}

// Saves model + optimizer + state (collective over tp; world rank 0 writes). Returns the directory.
std::string save(const Config& config, ModelSession& session, DataLoader& loader, int64_t step, Comm& world,
                 const std::map<std::string, std::string>& extra_metadata) {
  const bool writer = world.rank() == 0;
  Model& model = *session.model;
  std::vector<HostTensor> weights = model.gather_full(model.master(), "");
  std::vector<HostTensor> optimizer = session.optimizer->export_state();
  std::string dir;
  if (writer) {
    TrainState state;
    state.step = step;
    state.data_cursor = loader.cursor();
    state.rng_state = "none";  // training draws no random numbers after init; data is a function of the cursor
    state.config_hash = model_config_hash(config);
    dir = save_checkpoint(config.train.run_dir, weights, optimizer, state, config.model, config.checkpoint.keep_last,
                          extra_metadata);
  }
  world.barrier();
  return dir;
}

// Finds the checkpoint to resume from: "" none, "auto" the newest in run_dir (none is fine), else a directory.
std::string resume_dir(const Config& config) {
  const std::string& r = config.checkpoint.resume;
  if (r.empty()) return "";
  if (r == "auto") return latest_checkpoint(config.train.run_dir);
  RT_CHECK(std::filesystem::is_directory(r),
           "checkpoint.resume: '" << r << "' is not a directory; give a checkpoint directory, auto or leave it empty");
  return r;
}

void load_into(ModelSession& session, const LoadedCheckpoint& ckpt) {
  session.model->scatter_full(session.model->master(), ckpt.model, "");
  session.model->sync_compute_weights();
  if (!session.optimizer) return;
  if (ckpt.optimizer.empty()) session.optimizer->zero_state();  // a weights-only checkpoint (import-hf)
  else session.optimizer->import_state(ckpt.optimizer);
}

// What every checkpoint of this run records besides the model config: the context it trains at and the
// Hugging Face directory its weights first came from (export-hf copies the tokenizer from there).
std::map<std::string, std::string> run_metadata(const Config& config, const std::string& hf_source) {
  std::map<std::string, std::string> meta = {{"context_length", std::to_string(config.data.seq_len)}};
  if (!hf_source.empty()) meta["hf_source"] = hf_source;
  return meta;
}

}  // namespace

int train_main(const Config& config) {
  ProcessGrid grid = make_process_grid(config);
  const Device device = resolve_device(config);
  const bool rank0 = grid.world().rank() == 0;
  const TrainConfig& tc = config.train;
  const std::string layout = resolved_layout(config);

  if (rank0) {
    std::printf("%s", config_table(config).c_str());
    for (const std::string& note : config.notes) std::printf("%s\n", note.c_str());
    std::printf("cp=%d layout=%s tp=%d dp=%d device=%s\n", config.parallel.cp, layout.c_str(), config.parallel.tp,
                config.parallel.dp, device_name(device).c_str());
    std::filesystem::create_directories(tc.run_dir);
    std::ofstream(tc.run_dir + "/config.yaml") << config_to_yaml(config);
  }

  ModelSession session = build_session(config, ModelComms::from(grid), device, /*with_optimizer=*/true);
  Model& model = *session.model;
  AdamW& optimizer = *session.optimizer;
  const LoaderRank lrank = loader_rank(config, grid);
  std::unique_ptr<DataLoader> loader = make_loader(config, lrank, "train");
  std::unique_ptr<DataLoader> eval_loader = tc.eval_every > 0 ? make_loader(config, lrank, "eval") : nullptr;

  int64_t start_step = 0;
  std::string hf_source;  // carried into every checkpoint's metadata
  const std::string from = resume_dir(config);
  if (!from.empty()) {  // checkpoint.resume wins over train.init_from: a resumed run continues
    const LoadedCheckpoint ckpt = load_checkpoint(from);
    RT_CHECK(ckpt.state.config_hash.empty() || ckpt.state.config_hash == model_config_hash(config),
             "checkpoint " << from << " was written for a different model config; resume with the same model.*");
    load_into(session, ckpt);
    start_step = ckpt.state.step;
    loader->set_cursor(ckpt.state.data_cursor);
    if (auto it = ckpt.metadata.find("hf_source"); it != ckpt.metadata.end()) hf_source = it->second;
    if (rank0) std::printf("resumed from %s at step %lld\n", from.c_str(), (long long)start_step);
  } else if (!tc.init_from.empty()) {  // weights from the source, fresh optimizer, step 0
    const ModelSource source = read_model_source(tc.init_from);
    model.scatter_full(model.master(), load_source_weights(source), "");
    model.sync_compute_weights();
    optimizer.zero_state();
    hf_source = source.hf_source;
    if (rank0)
      std::printf("initialised from %s (%s), fresh optimizer at step 0; RoPE base %g, scaling %s\n",
                  tc.init_from.c_str(), source.is_hf ? "Hugging Face model" : "ringtrain checkpoint",
                  double(config.model.rope_base), rope_scaling_text(config.model.rope_scaling).c_str());
  } else {
    model.init_weights(tc.seed);
    optimizer.zero_state();
  }
  const std::map<std::string, std::string> metadata = run_metadata(config, hf_source);

  const FlopsModel flops = flops_model(config);
  const double peak = peak_tflops(config, device);
  const int devices = grid.dims().world();
  const double tokens_per_step = double(tc.batch_size) * config.data.seq_len;
  if (rank0) {
    std::printf("parameters %lld | memory per rank %s (arena) | tokens/step %.0f\n",
                (long long)count_parameters(config.model), format_bytes(double(session.arena->capacity())).c_str(),
                tokens_per_step);
    std::printf("MFU = %s * tok/s / (%.0f TFLOP/s * %d devices)%s\n", flops.formula().c_str(), peak, devices,
                peak > 0 ? "" : "  [no peak for this device: set log.peak_tflops to report MFU]");
  }
  // A resumed run continues its metrics file; a fresh one starts it over.
  std::unique_ptr<MetricsWriter> metrics;
  if (rank0) metrics = std::make_unique<MetricsWriter>(tc.run_dir + "/" + config.log.metrics_file, start_step > 0);

  g_stop_signal.store(0);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  auto old_int = std::signal(SIGINT, on_stop_signal);

  using clock = std::chrono::steady_clock;
  const auto run_start = clock::now();
  auto interval_start = run_start;  // since the host last waited for the GPU (logging, eval, checkpoint)
  int64_t interval_steps = 0;
  int64_t step = start_step;
  while (step < tc.steps) {
    const Batch batch = loader->next();
    model.attention().reset_timings();  // this step's ring attention time, all layers, forward + backward
    ++step;
    const float lr = learning_rate(config.optim, step, tc.steps);
    train_step(model, optimizer, batch, step, lr);
    ++interval_steps;
    bool waited = false;  // whether the host has waited for the GPU in this iteration

    if (step % std::max(1, config.log.every) == 0 || step == tc.steps) {
      const LossTally tally = step_losses(model, batch);  // every rank (collective); waits for the step
      waited = true;
      const double seconds = std::chrono::duration<double>(clock::now() - interval_start).count() /
                             double(interval_steps);
      if (rank0) {
        StepMetrics sm;
        sm.step = step, sm.total_steps = tc.steps;
        sm.loss = tally.mean(0);
        sm.group_losses = tally.group_means();
        sm.lr = lr, sm.grad_norm = optimizer.last_grad_norm();
        sm.tok_per_s = tokens_per_step / seconds;
        sm.mfu = peak > 0 ? mfu(flops, sm.tok_per_s, peak, devices) : NAN;
        sm.ms_per_step = seconds * 1e3;
        // Measured, not planned: `ringtrain plan` predicts the arena, and this checks the prediction.
        sm.peak_mem_bytes = int64_t(measured_memory_bytes(session.arena->device()));
        sm.extra["arena_bytes"] = double(session.arena->capacity());
        const double elapsed = std::chrono::duration<double>(clock::now() - run_start).count();
        sm.eta_s = elapsed / double(step - start_step) * double(tc.steps - step);
        sm.extra["tok_per_s_per_device"] = sm.tok_per_s / devices;
        // Rank 0's time inside ring attention, and the part of it blocked waiting for the ring (exposed comm).
        const RingTimings& ring = model.attention().timings();
        sm.extra["attn_ms"] = ring.total_s() * 1e3;
        sm.extra["comm_exposed_ms"] = ring.exposed_comm_s * 1e3;
        std::printf("%s\n", format_step_line(sm).c_str());
        std::fflush(stdout);
        metrics->write(sm);
      }
    }

    if (eval_loader && (step % tc.eval_every == 0 || step == tc.steps)) {
      const LossTally ev = evaluate(model, *eval_loader, tc.eval_batches);
      waited = true;
      if (rank0) {
        std::printf("eval step %lld | loss %.4f%s\n", (long long)step, ev.mean(0), halves_text(ev).c_str());
        nlohmann::json j = {{"step", step}, {"eval_loss", ev.mean(0)}};
        for (const auto& [name, mean] : ev.group_means()) j["eval_loss_" + name] = mean;
        metrics->write_json_line(j.dump());
      }
    }

    // Every rank must agree to stop at the same step: a signal may reach the ranks at different times.
    double stop = g_stop_signal.load() != 0 ? 1 : 0;
    grid.world().all_reduce_sum(&stop, 1);
    const bool periodic = config.checkpoint.every > 0 && step % config.checkpoint.every == 0;
    if (periodic || stop > 0 || (step == tc.steps && config.checkpoint.save_final)) {
      const std::string dir = save(config, session, *loader, step, grid.world(), metadata);
      waited = true;
      if (rank0) std::printf("saved checkpoint %s\n", dir.c_str());
    }
    if (stop > 0) {
      if (rank0) std::printf("stopping at step %lld on signal; resume with checkpoint.resume=auto\n", (long long)step);
      break;
    }
    if (waited) interval_start = clock::now(), interval_steps = 0;
  }
  std::signal(SIGTERM, old_term);
  std::signal(SIGINT, old_int);
  return 0;
}

int eval_main(const Config& config, const std::string& checkpoint_dir, const std::string& dump_logits_file) {
  ProcessGrid grid = make_process_grid(config);
  const Device device = resolve_device(config);
  ModelSession session = build_session(config, ModelComms::from(grid), device, /*with_optimizer=*/false);
  const LoadedCheckpoint ckpt = load_checkpoint(checkpoint_dir);
  load_into(session, ckpt);
  std::unique_ptr<DataLoader> loader = make_loader(config, loader_rank(config, grid), "eval");
  if (!dump_logits_file.empty()) {
    loader->set_cursor(0);
    dump_logits(*session.model, loader->next(), grid.dims().world(), dump_logits_file);  // the first eval batch
  }
  const LossTally ev = evaluate(*session.model, *loader, std::max(1, config.train.eval_batches));
  if (grid.world().rank() == 0)
    std::printf("eval %s: mean loss %.4f nats/token over %.0f tokens%s\n", checkpoint_dir.c_str(), ev.mean(0),
                ev.count[0], halves_text(ev).c_str());
  return 0;
}

}  // namespace rt
