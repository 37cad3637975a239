// ZeRO stages 1, 2 and 3 against stage 0 on the same (dp, cp, tp) grid and the same global batches (issue 18):
//   - step-1 loss bitwise equal (stage 3 gathers exact copies of the weights, so the forward is the same);
//   - step-1 gradients, assembled whole from the shards, within 1e-6 relative per tensor (reduce-scatter and
//     all-reduce add the ranks' contributions in different orders);
//   - 30-step losses within 1e-5 relative, final weights within 1e-4 relative per tensor;
//   - global-norm clipping active in at least one step (so the sharded norm is exercised);
//   - and the fp32 master, moments and reduced gradients are 1 / (dp x cp) of the units on every rank.
// Runs under `mpirun -np 4`; a grid smaller than the world runs on the first ranks, the others idle.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/model/optimizer.h"
#include "framework/plan/trainer_setup.h"
#include "framework/run/train_step.h"
#include "parallel/comm/mpi_comm.h"
#include "tests/mpi/mpi_world.h"

using namespace rt;

namespace {

constexpr double kGradRelTol = 1e-6;
constexpr double kCurveRelTol = 1e-5;
constexpr double kWeightRelTol = 1e-4;
constexpr int kSteps = 30;

using rt::test::world_rank;
using rt::test::world_size;
using rt::test::sub_world;
using rt::test::rel_diff;

struct ZeroCase {
  int dp, cp, tp;
  bool tied;
};

Config make_config(const ZeroCase& c, int zero, const std::string& checkpointing) {
  std::ostringstream y;
  y << "model:\n  n_layer: 3\n  d_model: 32\n  n_head: 4\n  n_kv_head: 2\n  vocab_size: 24\n  mlp: swiglu\n"
    << "  d_ff: 48\n  tied_embeddings: " << (c.tied ? "true" : "false") << "\n"
    << "data:\n  source: copy\n  seq_len: 32\n  seed: 7\n"
    << "parallel:\n  dp: " << c.dp << "\n  cp: " << c.cp << "\n  tp: " << c.tp << "\n  zero: " << zero << "\n"
    << "train:\n  batch_size: 4\n  steps: " << kSteps << "\n  eval_every: 0\n  lm_head_chunk: 40\n  seed: 11\n"
    << "  checkpointing: " << checkpointing << "\n"
    << "optim:\n  lr: 0.01\n  min_lr: 0.001\n  warmup_steps: 5\n  grad_clip: 0.5\n"
    << "device: cpu\n";
  return parse_config_text(y.str(), {}, /*world_size=*/0, "test_zero");
}

struct RunResult {
  std::vector<double> losses, grad_norms;
  std::vector<HostTensor> first_grads, final;
  size_t arena_bytes = 0;
  int zero = -1, shards = 0;
  int64_t local = 0, total = 0;  // elements of master() and of all units
};

RunResult train(const Config& config, ProcessGrid& grid) {
  ModelSession session = build_session(config, ModelComms::from(grid), Device::cpu(), /*with_optimizer=*/true);
  Model& model = *session.model;
  AdamW& adam = *session.optimizer;
  model.init_weights(config.train.seed);
  adam.zero_state();
  std::unique_ptr<DataLoader> loader = make_loader(config, loader_rank(config, grid), "train");
  RunResult r;
  r.zero = model.zero();
  r.arena_bytes = session.arena->peak();
  r.shards = model.shard_count();
  r.local = model.master().numel();
  for (const ParamUnit& u : model.units()) r.total += u.numel;
  EXPECT_EQ(adam.m().numel(), r.local);
  EXPECT_EQ(model.grads().numel(), r.local);
  for (int step = 1; step <= kSteps; ++step) {
    const Batch batch = loader->next();
    // train_step's body, with the step-1 gradients taken out before the update.
    const double count = model.global_target_count(batch);
    model.forward_backward(batch, count, /*want_grad=*/true);
    model.reduce_gradients();
    model.reduce_shared_kv_grads();
    if (step == 1) r.first_grads = model.gather_full(model.grads(), "");
    adam.step(step, learning_rate(config.optim, step, config.train.steps));
    r.losses.push_back(step_losses(model, batch).mean(0));
    r.grad_norms.push_back(adam.last_grad_norm());
  }
  r.final = model.gather_full(model.master(), "");
  return r;
}

std::string case_name(const ZeroCase& c) {
  return "dp" + std::to_string(c.dp) + "_cp" + std::to_string(c.cp) + "_tp" + std::to_string(c.tp) +
         (c.tied ? "_tied" : "");
}

class Zero : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(Zero, Stages123MatchStage0) {
  const ZeroCase c = GetParam();
  const int size = c.dp * c.cp * c.tp;
  ASSERT_LE(size, world_size()) << "run this suite with at least " << size << " ranks";
  std::shared_ptr<Comm> sub = sub_world(size);
  if (!sub) return;
  ProcessGrid grid = ProcessGrid::create(sub, GridDims{c.dp, c.cp, c.tp});
  // Full checkpointing makes stage 3 gather every layer twice (forward, and before the recompute).
  const std::string ckpt = c.tied ? "selective" : "full";
  const RunResult ref = train(make_config(c, 0, ckpt), grid);
  ASSERT_EQ(ref.zero, 0);
  bool clipped = false;
  for (double n : ref.grad_norms) clipped = clipped || n > 0.5;
  EXPECT_TRUE(clipped) << "no step clipped: the sharded gradient norm would not be tested";

  for (int zero = 1; zero <= 3; ++zero) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const RunResult got = train(make_config(c, zero, ckpt), grid);
    ASSERT_EQ(got.zero, zero);
    // The fp32 master, moments and reduced gradients are this rank's 1 / (dp x cp) share.
    EXPECT_EQ(got.shards, c.dp * c.cp);
    EXPECT_EQ(got.local * got.shards, got.total);
    ASSERT_EQ(got.losses.size(), ref.losses.size());
    EXPECT_EQ(got.losses[0], ref.losses[0]) << "step-1 loss must be bitwise equal";
    double worst_grad = 0, worst_curve = 0, worst_weight = 0;
    ASSERT_EQ(got.first_grads.size(), ref.first_grads.size());
    for (size_t i = 0; i < ref.first_grads.size(); ++i) {
      const HostTensor &g = got.first_grads[i], &r = ref.first_grads[i];
      ASSERT_EQ(g.name, r.name);
      double norm = 0;
      for (float x : r.values) norm += double(x) * x;
      ASSERT_GT(norm, 0) << "reference gradient of " << r.name << " is zero";
      const double err = rel_diff(g.values, r.values);
      worst_grad = std::max(worst_grad, err);
      EXPECT_LE(err, kGradRelTol) << "step-1 gradient " << g.name;
    }
    for (size_t i = 0; i < ref.losses.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got.losses[i]));
      const double err = std::abs(got.losses[i] - ref.losses[i]) / std::abs(ref.losses[i]);
      worst_curve = std::max(worst_curve, err);
      EXPECT_LE(err, kCurveRelTol) << "step " << i + 1 << ": loss " << got.losses[i] << " vs " << ref.losses[i];
      // Beyond the bounds (losses, step-1 grads, final weights): every step's norm. The shards sum the
      // squares in another order, and by step 30 the tied cp=4 run drifts to 1.5e-4 relative (its weights stay
      // within 1e-5), so 1e-3.
      EXPECT_LE(std::abs(got.grad_norms[i] - ref.grad_norms[i]), 1e-3 * ref.grad_norms[i]) << "step " << i + 1;
    }
    for (size_t i = 0; i < ref.final.size(); ++i) {
      const double err = rel_diff(got.final[i].values, ref.final[i].values);
      worst_weight = std::max(worst_weight, err);
      EXPECT_LE(err, kWeightRelTol) << "weight " << ref.final[i].name << " after " << kSteps << " steps";
    }
    if (sub->rank() == 0)
      std::printf("[ %s zero %d ] arena %zu vs %zu B | loss %.6f -> %.6f | worst grad %.1e | curve %.1e | weights "
                  "%.1e\n",
                  case_name(c).c_str(), zero, got.arena_bytes, ref.arena_bytes, ref.losses.front(),
                  ref.losses.back(), worst_grad, worst_curve, worst_weight);
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, Zero,
                         ::testing::Values(ZeroCase{1, 2, 1, false}, ZeroCase{1, 4, 1, true},
                                           ZeroCase{2, 2, 1, false}, ZeroCase{1, 2, 2, false}),
                         [](const ::testing::TestParamInfo<ZeroCase>& info) { return case_name(info.param); });

// A dp x cp group of one has nothing to shard: the model runs stage 0 and the trainer says so (a note).
TEST(ZeroNote, GroupOfOneRunsStage0WithANote) {
  if (world_rank() != 0) return;
  const Config config = make_config(ZeroCase{1, 1, 1, false}, 3, "none");
  EXPECT_NE(zero_note(config).find("nothing to shard"), std::string::npos) << zero_note(config);
  EXPECT_EQ(zero_note(make_config(ZeroCase{1, 2, 1, false}, 3, "none")), "");
  ProcessGrid one = ProcessGrid::local();
  ModelSession s = build_session(config, ModelComms::from(one), Device::cpu(), true);
  EXPECT_EQ(s.model->zero(), 0);
  EXPECT_EQ(s.model->shard_count(), 1);
}

}  // namespace
