// The fp8 grid tests' shared pieces (tests/mpi/test_fp8_grids.cpp, tests/mpi/test_fp8_zero_gather.cpp): the cases,
// their CPU-rank model config, and a short training run that records its losses, step-1 gradients, final weights and
// ZeRO traffic. Header-only; each test file includes it once.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/model/model.h"
#include "framework/model/optimizer.h"
#include "framework/plan/trainer_setup.h"
#include "kernels/ops.h"
#include "tests/mpi/mpi_world.h"
#include "tests/unit/test_shards.h"

namespace rt::test::fp8grid {

// The grid tests' tolerances (tests/mpi/test_fp8_grids.cpp says why these).
constexpr double kLossRelTol = 1e-5;
constexpr double kGradRelTol = 2e-3;
constexpr double kCurveRelTol = 1e-2;

struct Fp8Case {
  const char* recipe;       // tensorwise | rowwise | block
  int dp, cp, tp, a2a = 1;  // a2a: parallel.cp_a2a
  int zero = 0;
  const char* checkpointing = "none";
  const char* mlp = "swiglu";
  const char* cp_scheme = "";  // "": the copy task; ring | gather: packed documents with that scheme
  bool first_last = false;     // fp8.bf16_first_last
  const char* zero3_gather = "bf16";  // fp8.zero3_gather (written only where valid: precision fp8 at zero 3)
};

inline std::string case_name(const Fp8Case& c) {
  std::string n = std::string(c.recipe) + "_dp" + std::to_string(c.dp) + "_cp" + std::to_string(c.cp) + "_tp" +
                  std::to_string(c.tp);
  if (c.a2a > 1) n += "_a2a" + std::to_string(c.a2a);
  if (c.zero > 0) n += "_zero" + std::to_string(c.zero);
  if (std::string(c.checkpointing) != "none") n += std::string("_") + c.checkpointing;
  n += std::string("_") + c.mlp;
  if (c.cp_scheme[0]) n += std::string("_documents_") + c.cp_scheme;
  if (c.first_last) n += "_bf16_first_last";
  return n;
}

inline std::string documents_shard() {
  return rt::test::write_llmc_shard_u16(
      (std::filesystem::temp_directory_path() / ("rt_fp8_docs_" + std::to_string(rt::test::world_rank()) + ".bin")).string(),
      rt::test::packed_document_tokens(20000));
}

// The tensorwise / rowwise model: every GEMM dimension a multiple of 16 on every grid here (d_model 64, 4 heads of
// 16, 2 KV heads, d_ff 128; 64 tokens, 4 sequences). The block model: multiples of 128 (d_model 256, 4 heads of 64,
// d_ff 256; 256 tokens, 2 sequences).
inline Config make_config(const Fp8Case& c, int dp, int cp, int tp, int a2a, int zero, const std::string& precision) {
  const bool block = std::string(c.recipe) == "block";
  std::ostringstream y;
  y << "model:\n  n_layer: " << (c.first_last ? 3 : 2) << "\n  d_model: " << (block ? 256 : 64)
    << "\n  n_head: 4\n  n_kv_head: " << (block ? 4 : 2) << "\n  vocab_size: 32\n  mlp: " << c.mlp
    << "\n  d_ff: " << (block ? 256 : 128) << "\n";
  const int seq = block ? 128 * c.cp : 64;  // block: 128 tokens per rank and sequence
  if (c.cp_scheme[0])
    y << "data:\n  source: shards\n  path: " << documents_shard() << "\n  documents: eot\n  eot_token: 0\n"
      << "  positions: document\n  seq_len: " << seq << "\n  seed: 7\n";
  else
    y << "data:\n  source: copy\n  seq_len: " << seq << "\n  seed: 7\n";
  y << "parallel:\n  dp: " << dp << "\n  cp: " << cp << (block ? "\n  layout: contiguous" : "") << "\n  cp_a2a: " << a2a << "\n  tp: " << tp
    << "\n  zero: " << zero << (c.cp_scheme[0] ? std::string("\n  cp_scheme: ") + c.cp_scheme : std::string()) << "\n"
    << "train:\n  batch_size: " << (block ? c.dp : 4) << "\n  steps: 8\n  eval_every: 0\n  lm_head_chunk: 64\n"
    << "  seed: 11\n  checkpointing: " << c.checkpointing << "\n  precision: " << precision << "\n"
    << "fp8:\n  recipe: " << c.recipe << "\n  bf16_first_last: " << (c.first_last ? "true" : "false") << "\n"
    << "  zero3_gather: " << (zero == 3 && precision == "fp8" ? c.zero3_gather : "bf16") << "\n"
    << "optim:\n  lr: 0.01\n  min_lr: 0.001\n  warmup_steps: 2\n  grad_clip: 1.0\n"
    << "device: cpu\n";
  return parse_config_text(y.str(), {}, /*world_size=*/0, "test_fp8_grids");
}

struct RunResult {
  std::vector<double> losses;
  std::vector<HostTensor> first_grads;  // full gradients of step 1
  std::vector<HostTensor> final;        // full weights after the last step
  Model::ZeroStats zero_last;           // the ZeRO traffic of the last step (its update's amax gathers included)
};

inline double global_mean_loss(const Batch& batch, const std::vector<float>& losses, double count, Comm& dp_cp) {
  double sum = 0;
  for (size_t i = 0; i < losses.size(); ++i)
    if (batch.targets[i] >= 0) sum += losses[i];
  dp_cp.all_reduce_sum(&sum, 1);
  return sum / count;
}

// Steps [first, last] of a run whose model and optimizer are in `session` (train_main's step without files).
inline void run_steps(const Config& config, ProcessGrid& grid, ModelSession& session, DataLoader& loader, int first,
               int last, RunResult& r) {
  Model& model = *session.model;
  for (int step = first; step <= last; ++step) {
    const Batch batch = loader.next();
    model.reset_zero_stats();
    const double count = model.global_target_count(batch);
    model.forward_backward(batch, count, /*want_grad=*/true);
    std::vector<float> losses(size_t(model.losses().numel()));
    copy_cast(Tensor(losses.data(), DType::f32, Device::cpu(), {model.losses().numel()}), model.losses());
    r.losses.push_back(global_mean_loss(batch, losses, count, grid.dp_cp()));
    model.reduce_gradients();
    model.reduce_shared_kv_grads();
    if (step == 1) r.first_grads = model.gather_full(model.grads(), "grad.");
    session.optimizer->step(step, learning_rate(config.optim, step, config.train.steps));
    r.zero_last = model.zero_stats();
  }
}

// nudge: every master weight moved up by one f32 ulp after the init (the one-rank noise floor, below).
inline RunResult train(const Config& config, ProcessGrid& grid, int steps, bool nudge = false) {
  ModelSession session = build_session(config, ModelComms::from(grid), Device::cpu(), /*with_optimizer=*/true);
  session.model->init_weights(config.train.seed);
  if (nudge) {
    float* m = session.model->master().ptr<float>();  // (local) f32
    for (int64_t i = 0; i < session.model->master().numel(); ++i) m[i] = std::nextafter(m[i], 1e30f);
    session.model->sync_compute_weights();
  }
  session.optimizer->zero_state();
  std::unique_ptr<DataLoader> loader = make_loader(config, loader_rank(config, grid), "train");
  RunResult r;
  run_steps(config, grid, session, *loader, 1, steps, r);
  r.final = session.model->gather_full(session.model->master(), "");
  return r;
}

// The relative error of every gradient against a reference (fails naming each above `tol`); returns the worst.
// Asserts the reference is not zero.
inline double worst_grad_error(const std::vector<HostTensor>& got, const std::vector<HostTensor>& ref, double tol) {
  EXPECT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, ref[i].name);
    for (float v : got[i].values) EXPECT_TRUE(std::isfinite(v)) << got[i].name;
    double norm = 0;
    for (float v : ref[i].values) norm += double(v) * v;
    EXPECT_GT(norm, 0) << ref[i].name << ": a zero reference gradient proves nothing";
    const double e = rt::test::rel_diff(got[i].values, ref[i].values);
    if (e > tol) ADD_FAILURE() << "gradient " << ref[i].name << ": ||g - ref|| / ||ref|| = " << e;
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace rt::test::fp8grid
