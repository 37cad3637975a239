// eval_main (framework/eval/eval.h): the mean held-out loss of a checkpoint's weights.
//   - the model comes from the checkpoint (framework/checkpoint/model_source.h): fields the config does not set are taken
//     from model.safetensors' metadata; an explicitly set field that disagrees is an error naming both values;
//   - --dump-logits: the first eval batch's logits and tokens as .npy (framework/eval/dump_logits.h);
//   - only model.safetensors is read (checked against state.json when the directory has one);
//   - any grid: started on fewer (or more) processes than the config's dp x cp x tp, it evaluates on a grid
//     those processes allow and says so (the loss does not depend on the grid);
//   - --task loss-by-position | needle | ruler: framework/eval/eval_tasks.h (ruler: framework/eval/eval_ruler.h).
#include <cstdio>
#include <map>

#include "framework/checkpoint/checkpoint.h"
#include "framework/eval/command_inputs.h"
#include "framework/eval/dump_logits.h"
#include "framework/eval/eval_outputs.h"
#include "framework/eval/eval_ruler.h"
#include "framework/eval/eval_tasks.h"
#include "framework/checkpoint/model_source.h"
#include "framework/base/run_errors.h"
#include "framework/run/tensorboard_eval.h"
#include "framework/run/train_step.h"
#include "framework/eval/eval.h"
#include "framework/plan/resolve.h"
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

namespace {

// The full LM head (V, C) of the loaded weights: the tied embedding when the model ties them.
HostTensor take_lm_head(const Config& config, const std::vector<HostTensor>& weights) {
  const std::string name = config.model.tied_embeddings ? "tok_embeddings.weight" : "lm_head.weight";
  for (const HostTensor& t : weights)
    if (t.name == name) return t;
  throw Error("eval: the checkpoint has no " + name + " tensor (the LM head the needle and ruler tasks read)");
}

int needle_task(Model& model, const Config& config, const LoaderRank& rank, const HostTensor& lm_head,
                const EvalTaskArgs& task, const std::string& checkpoint, bool rank0, OutputFiles& outputs) {
  NeedleCases read;
  agree_on([&] { read = read_needle_cases(config, task.cases); }, kExitUsage);
  if (rank0) {
    if (!read.note.empty()) std::fprintf(stderr, "warning: %s\n", read.note.c_str());
    std::fprintf(stderr, "needle: %zu cases from %s, %d per forward\n", read.cases.size(), task.cases.c_str(),
                config.train.batch_size);
  }
  const std::vector<NeedleScore> scores = score_needles(model, config, rank, read.cases, lm_head, rank0);
  if (!rank0) return 0;
  write_needle_scores(read.cases, scores, task.out, checkpoint, outputs);
  outputs.commit();
  write_eval_events(config, "needle", task.out, checkpoint);  // TensorBoard (log.tensorboard), from the .jsonl
  int64_t tokens = 0, hits = 0, exact = 0;
  for (const NeedleScore& s : scores)
    tokens += s.answer_tokens, hits += s.argmax_hits, exact += s.argmax_hits == s.answer_tokens ? 1 : 0;
  std::printf("needle %s: %lld/%zu cases exact, %.2f%% of %lld answer tokens argmax-correct; wrote %s "
              "(heatmap: python3 launch/plot_needles.py %s --out needles.png)\n",
              checkpoint.c_str(), (long long)exact, scores.size(), 100.0 * double(hits) / double(std::max<int64_t>(tokens, 1)),
              (long long)tokens, task.out.c_str(), task.out.c_str());
  return 0;
}

}  // namespace

int eval_main(const Config& loaded, const std::string& checkpoint, int world_size,
              const std::string& dump_logits_file, const EvalTaskArgs& task) {
  const std::string bad_task = check_eval_task_args(task);
  agree_on([&] { if (!bad_task.empty()) throw RunError(kExitUsage, "eval: " + bad_task); }, kExitUsage);
  Config config = loaded;
  std::vector<HostTensor> weights;
  ModelSourceReport taken;
  std::string grid_note;
  agree_on([&] {
    std::map<std::string, std::string> metadata;
    weights = load_checkpoint_argument("eval", checkpoint, &metadata);
    taken = apply_model_from_source(config, metadata, "checkpoint", checkpoint);
    grid_note = fit_grid_to_world(config, world_size);
    validate_config(config, world_size);
    check_eval_request(config, task, dump_logits_file, world_size);  // options that cannot take effect, outputs
  }, kExitUsage);
  OutputFiles outputs("eval");  // every output renamed into place together at the end
  Resolved resolved;  // every auto in one step (framework/plan/resolve.h), after the grid is fitted; device: cuda
                      // without a GPU is the config's error, found by every rank alike
  agree_on([&] { resolved = resolve_autos(config, Purpose::eval); }, kExitUsage);
  config = resolved.config;
  const Device device = resolved.device;
  ProcessGrid grid = make_process_grid(config, device);
  const bool rank0 = grid.world().rank() == 0;
  if (rank0) print_resolved(resolved);  // stderr, once
  if (rank0) {
    for (const std::string& t : taken.taken) std::fprintf(stderr, "eval: %s (from the checkpoint)\n", t.c_str());
    if (!grid_note.empty()) std::fprintf(stderr, "%s\n", grid_note.c_str());
  }
  ModelSession session = build_session(config, ModelComms::from(grid), device, /*with_optimizer=*/false);
  std::unique_ptr<DataLoader> loader;
  EvalPlan plan;
  agree_on([&] {
    session.model->scatter_full(session.model->weights(), weights, "");
    session.model->sync_compute_weights();
    loader = make_loader(config, loader_rank(config, grid), "eval");
    plan = plan_eval(config, *loader);
  }, kExitUsage);
  if (task.task == "needle" || task.task == "ruler") {
    const HostTensor lm_head = take_lm_head(config, weights);
    weights.clear();
    if (task.task == "ruler")
      return ruler_task(*session.model, config, loader_rank(config, grid), lm_head, task, checkpoint, rank0,
                        outputs);
    return needle_task(*session.model, config, loader_rank(config, grid), lm_head, task, checkpoint, rank0,
                       outputs);
  }
  weights.clear();
  if (rank0) std::fprintf(stderr, "eval: %s\n", plan.text().c_str());
  if (!dump_logits_file.empty()) {
    loader->set_cursor(0);
    dump_logits(*session.model, loader->next(), grid.dims().world(), dump_logits_file, outputs);  // first batch
  }
  if (task.task == "loss-by-position") {
    const PositionLosses p = loss_by_position(*session.model, *loader, plan, config.data.seq_len,
                                              task.by == "document");
    if (rank0) {
      write_position_losses(p, task.out, checkpoint, task.by, outputs);
      outputs.commit();
      write_eval_events(config, task.task, task.out, checkpoint);  // TensorBoard (log.tensorboard), from the .jsonl
      std::printf("eval %s: mean loss %s over %.0f targets, by position in the %s: wrote %s and its .csv (plot: "
                  "python3 launch/plot_loss_by_position.py %s --out loss_by_position.png)\n", checkpoint.c_str(),
                  loss_text(p.total).c_str(), p.total.count[0], task.by.c_str(), task.out.c_str(), task.out.c_str());
    }
    return 0;
  }
  const LossTally ev = evaluate(*session.model, *loader, plan);
  if (rank0) {
    outputs.commit();  // --dump-logits
    if (ev.no_targets()) std::fprintf(stderr, "warning: eval has no targets: %s\n", no_targets_reason(config).c_str());
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
