// A CUDA training step (framework/run/train_step.h, the body of train_main's loop) makes the host wait for the
// GPU only at its logging point, and the values read there are those of the old, synchronous path:
//   - cuda_host_waits() (every cudaStreamSynchronize / cudaEventSynchronize in ringtrain) does not move
//     across unlogged steps, and moves when the step is logged (so the check can fail);
//   - the logged losses (all targets, copy-task halves) equal Model::step's host losses of a second session
//     with the same weights and batch;
//   - the logged grad norm equals the fp64 host norm of the step's gradients, and the update AdamW made with
//     the clip factor read on the device equals an fp64 host AdamW with the host-computed clip (clipping
//     active: optim.grad_clip is set far below the norm), on step 2 where the moments make the scale matter;
//   - the ring timings read at the logging point cover that step's calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "framework/run/train_step.h"
#include "tests/gpu/gpu_model_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

constexpr float kClip = 0.05f;

struct GpuTrainer {
  ModelSession session;
  std::unique_ptr<DataLoader> loader;
  GpuTrainer(const Config& config, ProcessGrid& grid) {
    session = build_session(config, ModelComms::from(grid), Device::cuda(0), /*with_optimizer=*/true);
    session.model->init_weights(config.train.seed);
    session.model->sync_compute_weights();
    session.optimizer->zero_state();
    loader = make_loader(config, loader_rank(config, grid), "train");
  }
};

std::vector<float> download(const Tensor& t) {
  std::vector<float> v(size_t(t.numel()), std::nanf(""));
  copy_cast(Tensor(v.data(), DType::f32, Device::cpu(), {t.numel()}), t);
  return v;
}

Config clipped_config() {
  Config config = gpu_model_config(1, 1, 1);
  config.optim.grad_clip = kClip;
  return config;
}

TEST(GpuStepNoHostWait, UnloggedStepsDoNotWaitAndLoggingDoes) {
  RT_REQUIRE_CUDA();
  const Config config = clipped_config();
  ProcessGrid grid = ProcessGrid::local();
  GpuTrainer t(config, grid);
  Model& model = *t.session.model;
  AdamW& adam = *t.session.optimizer;
  for (int64_t step = 1; step <= 4; ++step) {
    const Batch batch = t.loader->next();
    const uint64_t before = cuda_host_waits();
    model.attention().reset_timings();
    train_step(model, adam, batch, step, learning_rate(config.optim, step, config.train.steps));
    EXPECT_EQ(cuda_host_waits(), before) << "step " << step << " waited for the GPU outside its logging point "
                                         << "(run with RINGTRAIN_TRACE_HOST_WAITS=1 to see where)";
    if (step == 4) {  // the logging point
      const LossTally tally = step_losses(model, batch);
      const double norm = adam.last_grad_norm();
      const RingTimings& ring = model.attention().timings();
      EXPECT_GT(cuda_host_waits(), before) << "the logging point read device values without waiting";
      EXPECT_TRUE(std::isfinite(tally.mean(0)) && tally.mean(0) > 0) << tally.mean(0);
      EXPECT_TRUE(std::isfinite(norm) && norm > 0) << norm;
      EXPECT_EQ(ring.calls, 2 * model.shape().L) << "one forward and one backward ring call per layer";
      EXPECT_GT(ring.compute_s, 0.0);
    }
  }
}

TEST(GpuStepNoHostWait, LoggedValuesMatchTheSynchronousPath) {
  RT_REQUIRE_CUDA();
  const Config config = clipped_config();
  ProcessGrid grid = ProcessGrid::local();
  GpuTrainer a(config, grid);  // the new path
  GpuTrainer b(config, grid);  // reference: Model::step's host losses
  Model& model = *a.session.model;
  AdamW& adam = *a.session.optimizer;
  const OptimConfig& o = config.optim;

  // Step 1: the logged losses against Model::step on the same weights and batch.
  const Batch batch1 = a.loader->next();
  train_step(model, adam, batch1, 1, learning_rate(o, 1, config.train.steps));
  const LossTally got = step_losses(model, batch1);
  const Batch batch1b = b.loader->next();
  LossTally want;
  want.add(batch1b, b.session.model->step(batch1b, b.session.model->global_target_count(batch1b), true));
  ASSERT_GT(want.count[0], 0);
  ASSERT_EQ(want.group_means().size(), 2u) << "the copy task should report its two halves";
  ASSERT_EQ(got.sum.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(got.count[k], want.count[k]) << k;
    EXPECT_NEAR(got.mean(k), want.mean(k), 1e-5 * std::abs(want.mean(k))) << "loss part " << k;
  }

  // Step 2 with clipping active: the device clip factor against fp64 host AdamW from the downloaded state.
  const std::vector<float> p1 = download(model.master()), m1 = download(adam.m()), v1 = download(adam.v());
  const Batch batch2 = a.loader->next();
  const float lr = learning_rate(o, 2, config.train.steps);
  const uint64_t before = cuda_host_waits();
  train_step(model, adam, batch2, 2, lr);
  EXPECT_EQ(cuda_host_waits(), before);
  const double norm = adam.last_grad_norm();
  const std::vector<float> g = download(model.grads()), p2 = download(model.master());  // grads are not scaled
  double ss = 0;
  for (const ParamEntry& e : model.params())
    for (int64_t i = e.offset; i < e.offset + e.numel; ++i) ss += double(g[size_t(i)]) * g[size_t(i)];
  const double want_norm = std::sqrt(ss);
  EXPECT_NEAR(norm, want_norm, 1e-5 * want_norm);
  ASSERT_GT(want_norm, 2 * kClip) << "clipping must be active for this test to mean something";
  const double scale = double(kClip) / (want_norm + 1e-6);

  const double bc1 = 1 - std::pow(double(o.beta1), 2.0), bc2 = 1 - std::pow(double(o.beta2), 2.0);
  double num = 0, den = 0;
  for (const ParamEntry& e : model.params()) {
    const double wd = e.decay ? o.weight_decay : 0.0;
    for (int64_t i = e.offset; i < e.offset + e.numel; ++i) {
      const size_t k = size_t(i);
      const double gi = double(g[k]) * scale;
      const double m = o.beta1 * double(m1[k]) + (1 - o.beta1) * gi;
      const double v = o.beta2 * double(v1[k]) + (1 - o.beta2) * gi * gi;
      const double p = double(p1[k]) * (1 - lr * wd) - lr * (m / bc1) / (std::sqrt(v / bc2) + o.eps);
      ASSERT_TRUE(std::isfinite(p2[k])) << e.name;
      const double d = (double(p2[k]) - p1[k]) - (p - p1[k]);
      num += d * d, den += (p - p1[k]) * (p - p1[k]);
    }
  }
  const double err = std::sqrt(num / den);
  EXPECT_LT(err, 1e-4) << "update with the device clip factor vs fp64 host AdamW";

  // Without the clip factor the update would differ by far more than that tolerance.
  double num_unclipped = 0;
  for (const ParamEntry& e : model.params())
    for (int64_t i = e.offset; i < e.offset + e.numel; ++i) {
      const size_t k = size_t(i);
      const double wd = e.decay ? o.weight_decay : 0.0;
      const double m = o.beta1 * double(m1[k]) + (1 - o.beta1) * g[k];
      const double v = o.beta2 * double(v1[k]) + (1 - o.beta2) * double(g[k]) * g[k];
      const double p = double(p1[k]) * (1 - lr * wd) - lr * (m / bc1) / (std::sqrt(v / bc2) + o.eps);
      const double d = (double(p2[k]) - p1[k]) - (p - p1[k]);
      num_unclipped += d * d;
    }
  EXPECT_GT(std::sqrt(num_unclipped / den), 10 * err) << "the test cannot tell clipped from unclipped updates";
  std::printf("norm %.6f (host %.6f), clip scale %.4f, update rel err %.2e\n", norm, want_norm, scale, err);
}

}  // namespace
}  // namespace rt::test
