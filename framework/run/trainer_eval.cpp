// eval_main (framework/run/trainer.h): the mean held-out loss of a checkpoint's weights.
//   - the model comes from the checkpoint (framework/checkpoint/model_source.h): fields the config does not set are taken
//     from model.safetensors' metadata; an explicitly set field that disagrees is an error naming both values;
//   - --dump-logits: the first eval batch's logits and tokens as .npy (framework/run/dump_logits.h);
//   - only model.safetensors is read (checked against state.json when the directory has one);
//   - any grid: started on fewer (or more) processes than the config's dp x cp x tp, it evaluates on a grid
//     those processes allow and says so (the loss does not depend on the grid).
#include <cstdio>
#include <map>

#include "framework/checkpoint/checkpoint.h"
#include "framework/run/dump_logits.h"
#include "framework/checkpoint/model_source.h"
#include "framework/base/run_errors.h"
#include "framework/run/train_step.h"
#include "framework/run/trainer.h"
#include "framework/plan/trainer_setup.h"

namespace rt {
namespace {

bool grid_fits(const Config& c, int dp, int cp, int tp) {
  Config trial = c;
  trial.parallel.dp = dp, trial.parallel.cp = cp, trial.parallel.tp = tp;
  try {
    validate_config(trial, dp * cp * tp);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::string fit_grid_to_world(Config& config, int world_size) {
  ParallelConfig& p = config.parallel;
  if (p.dp * p.cp * p.tp == world_size) return "";
  const std::string before = "dp=" + std::to_string(p.dp) + " cp=" + std::to_string(p.cp) +
                             " tp=" + std::to_string(p.tp);
  // Keep as much of the configured grid as fits: cp, then tp, then dp take the processes.
  const int candidates[][3] = {{1, world_size, 1}, {1, 1, world_size}, {world_size, 1, 1}};
  for (const auto& g : candidates) {
    if (!grid_fits(config, g[0], g[1], g[2])) continue;
    p.dp = g[0], p.cp = g[1], p.tp = g[2];
    return "eval: the config's grid (" + before + ") does not match the " + std::to_string(world_size) +
           " process(es) of this run; evaluating on dp=" + std::to_string(p.dp) + " cp=" + std::to_string(p.cp) +
           " tp=" + std::to_string(p.tp) + " instead (the loss is the same on any grid)";
  }
  throw RunError(kExitUsage, "eval: the config's grid (" + before + ") needs " +
                                 std::to_string(int64_t(p.dp) * p.cp * p.tp) + " processes and no grid of " +
                                 std::to_string(world_size) + " fits this model and data; launch with mpirun -np " +
                                 std::to_string(int64_t(p.dp) * p.cp * p.tp) + " or set parallel.* to a grid of " +
                                 std::to_string(world_size));
}

int eval_main(const Config& loaded, const std::string& checkpoint, int world_size,
              const std::string& dump_logits_file) {
  Config config = loaded;
  std::vector<HostTensor> weights;
  ModelSourceReport taken;
  std::string grid_note;
  agree_on([&] {
    std::map<std::string, std::string> metadata;
    weights = load_model_weights(checkpoint, &metadata);
    taken = apply_model_from_source(config, metadata, "checkpoint", checkpoint);
    grid_note = fit_grid_to_world(config, world_size);
    validate_config(config, world_size);
  }, kExitUsage);
  Device device;  // device: cuda without a GPU is the config's error, found by every rank alike
  agree_on([&] { device = resolve_device(config); }, kExitUsage);
  ProcessGrid grid = make_process_grid(config);
  const bool rank0 = grid.world().rank() == 0;
  if (rank0) {
    for (const std::string& t : taken.taken) std::printf("eval: %s (from the checkpoint)\n", t.c_str());
    if (!grid_note.empty()) std::printf("%s\n", grid_note.c_str());
  }
  ModelSession session = build_session(config, ModelComms::from(grid), device, /*with_optimizer=*/false);
  std::unique_ptr<DataLoader> loader;
  EvalPlan plan;
  agree_on([&] {
    session.model->scatter_full(session.model->master(), weights, "");
    session.model->sync_compute_weights();
    loader = make_loader(config, loader_rank(config, grid), "eval");
    plan = plan_eval(config, *loader);
  }, kExitUsage);
  if (rank0) std::printf("eval: %s\n", plan.text().c_str());
  if (!dump_logits_file.empty()) {
    loader->set_cursor(0);
    dump_logits(*session.model, loader->next(), grid.dims().world(), dump_logits_file);  // the first eval batch
  }
  const LossTally ev = evaluate(*session.model, *loader, plan);
  if (rank0) {
    if (ev.no_targets()) std::printf("warning: eval has no targets: %s\n", no_targets_reason(config).c_str());
    std::printf("eval %s: mean loss %s over %.0f targets (nats/token)%s%s\n", checkpoint.c_str(), loss_text(ev).c_str(),
                ev.count[0], halves_text(ev).c_str(),
                config.data.documents == "eot"
                    ? (" (" + std::to_string(int64_t(ev.boundary_dropped)) + " targets at document boundaries "
                       "excluded)").c_str()
                    : "");
  }
  return 0;
}

}  // namespace rt
