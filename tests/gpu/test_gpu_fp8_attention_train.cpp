// fp8.attention in the GPU model (train.precision fp8, head dim 128, cp 1: the sm_90a FP8 attention backward through
// RingAttention::set_fp8_backward and its arena workspace), on a tiny model (2 layers, d_model 256, 2 heads of 128,
// 1 K/V head, 256 tokens, batch 2):
//   - first step (the copy task), fp8.attention on vs off on the GPU: the same forward (loss equal to 1e-6), the gradients moved by the
//     FP8 backward (whole-model relative L2 between 1e-3, else the FP8 ops were not taken, and 0.2), all finite;
//   - first step, fp8.attention on the GPU vs on the CPU (the same recipe in f32): loss within 2e-2, whole gradient
//     within 1.5e-1, every tensor within 4e-1 (the bounds of GpuModelFp8, FP8 linear layers on both sides);
//   - 15 AdamW steps on one fixed batch that only attention can predict (each sample a random block of 32 tokens
//     repeated: from the second copy on the next token sits 32 positions back), on vs off: every loss finite, the mean
//     loss of steps 6-15 within 5% of the off run's and below half the first step's (the copy task learns too slowly
//     to compare anything in a few steps: 4.28 -> 4.18 in 40 steps on the CPU; the CPU's fp8.attention test sees
//     -0.7..+2.0% over 7 seeds on this kind of batch).
// Skipped only without a CUDA device ("no CUDA device"); a GPU other than an H100 / H200 fails with the FP8 attention
// kernel's refusal (sm_90a only), as tests/gpu/test_cuda_attn_bwd_fp8.cpp does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "framework/model/optimizer.h"
#include "tests/gpu/gpu_model_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

Config tiny_config(bool fp8_attention) {
  return gpu_model_config(1, 1, 1, "swiglu", 1, "none",
                          {"model.d_model=256", "model.n_head=2", "model.d_ff=512", "data.seq_len=256",
                           "train.lm_head_chunk=256", "train.precision=fp8",
                           std::string("fp8.attention=") + (fp8_attention ? "true" : "false")});
}

TEST(GpuFp8AttentionTrain, FirstStepOnVsOffAndAgainstTheCpu) {
  RT_REQUIRE_CUDA();
  ProcessGrid grid = ProcessGrid::local();
  const StepResult on = first_step(tiny_config(true), grid, Device::cuda(0));
  const StepResult off = first_step(tiny_config(false), grid, Device::cuda(0));
  const StepResult cpu = first_step(tiny_config(true), grid, Device::cpu());
  ASSERT_TRUE(std::isfinite(on.loss)) << on.loss;
  EXPECT_NEAR(on.loss, off.loss, 1e-6 * std::abs(off.loss)) << "the forward is the same; only the backward differs";
  const GradCompare moved = compare_grads(on.grads, off.grads);
  const GradCompare vs_cpu = compare_grads(on.grads, cpu.grads);
  const double loss_err = std::abs(on.loss - cpu.loss) / std::abs(cpu.loss);
  std::printf("[ gpu fp8 attention ] first step: on vs off grad whole %.3e worst %.3e (%s) | vs CPU fp8.attention loss "
              "%.5f / %.5f (rel %.1e) grad whole %.3e worst %.3e (%s)\n",
              moved.whole, moved.worst, moved.worst_name.c_str(), on.loss, cpu.loss, loss_err, vs_cpu.whole,
              vs_cpu.worst, vs_cpu.worst_name.c_str());
  EXPECT_GT(moved.whole, 1e-3) << "fp8.attention left the GPU gradients as they were: the FP8 ops were not taken";
  EXPECT_LT(moved.whole, 0.2);  // infinite (so failing) on a NaN
  EXPECT_LE(loss_err, 2e-2);
  EXPECT_LE(vs_cpu.whole, 1.5e-1);
  EXPECT_LE(vs_cpu.worst, 4e-1) << vs_cpu.worst_name;
}

// B samples of n tokens, each a random block of `period` tokens (of vocab) repeated; targets the next token (the last
// none), positions 0..n-1, no loss groups.
Batch periodic_batch(int vocab, int64_t B, int64_t n, int64_t period, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b;
  b.batch = B, b.tokens_per_rank = n;
  for (int64_t s = 0; s < B; ++s) {
    std::vector<int32_t> block(static_cast<size_t>(period));
    for (int32_t& t : block) t = int32_t(rng() % uint64_t(vocab));
    for (int64_t i = 0; i < n; ++i) {
      b.tokens.push_back(block[size_t(i % period)]);
      b.targets.push_back(i + 1 < n ? block[size_t((i + 1) % period)] : -1);
      b.positions.push_back(int32_t(i));
      b.groups.push_back(0);
    }
  }
  return b;
}

// The losses of `steps` AdamW steps (constant learning rate) on one periodic batch from train.seed's weights.
std::vector<double> gpu_losses(const Config& config, int steps) {
  ProcessGrid grid = ProcessGrid::local();
  ModelSession session = build_session(config, ModelComms::from(grid), Device::cuda(0), /*with_optimizer=*/true);
  Model& model = *session.model;
  model.init_weights(config.train.seed);
  model.sync_compute_weights();
  session.optimizer->zero_state();
  const Batch batch = periodic_batch(config.model.vocab_size, config.train.batch_size, config.data.seq_len, 32, 100);
  const double count = model.global_target_count(batch);
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    const std::vector<float> l = model.step(batch, count, /*want_grad=*/true);
    double sum = 0;
    for (size_t i = 0; i < l.size(); ++i)
      if (batch.targets[i] >= 0) sum += l[i];
    losses.push_back(sum / count);
    session.optimizer->step(step, config.optim.lr);
  }
  return losses;
}

TEST(GpuFp8AttentionTrain, FifteenStepsCloseToFp8LinearAlone) {
  RT_REQUIRE_CUDA();
  constexpr int kSteps = 15;
  const std::vector<double> on = gpu_losses(tiny_config(true), kSteps), off = gpu_losses(tiny_config(false), kSteps);
  for (int i = 0; i < kSteps; ++i)
    ASSERT_TRUE(std::isfinite(on[size_t(i)]) && std::isfinite(off[size_t(i)])) << "step " << i + 1;
  double tail_on = 0, tail_off = 0;
  for (int i = 5; i < kSteps; ++i) tail_on += on[size_t(i)] / 10, tail_off += off[size_t(i)] / 10;
  const double gap = (tail_on - tail_off) / tail_off;
  std::printf("[ gpu fp8 attention ] %d steps: loss %.4f -> %.4f (on), %.4f -> %.4f (off); steps 6-15 mean %.4f vs "
              "%.4f (%+.2f%%)\n",
              kSteps, on.front(), on.back(), off.front(), off.back(), tail_on, tail_off, 100 * gap);
  EXPECT_LT(std::abs(gap), 0.05);
  // Learning: the last step's loss under half the first (H200, 2026-12-04: 4.23 -> 1.36 on, -> 1.41 off; the mean of
  // steps 6-15, 2.37, still holds the early steps, so it is not the measure).
  EXPECT_LT(on.back(), 0.5 * on.front()) << "the fp8.attention run did not learn the task";
  EXPECT_LT(off.back(), 0.5 * off.front()) << "the FP8-linear-only run did not learn the task";
}

}  // namespace
}  // namespace rt::test
