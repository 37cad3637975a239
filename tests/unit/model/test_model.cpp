// Whole-model tests: the gradient of the explicit backward against central finite differences of the
// loss (one random direction per parameter tensor), GELU and SwiGLU, GQA, tied and untied; activation
// checkpointing; the parameter table and its tp shards; grid-independent initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "tests/unit/test_model_util.h"

namespace rt {
namespace {

using modeltest::LocalModel;
using modeltest::mean_loss;
using modeltest::random_batch;
using modeltest::randomize_weights;
using modeltest::small_config;

struct GradCase {
  const char* name;
  std::string mlp;
  int n_kv_head;
  bool tied;
  ActivationCheckpointing ckpt;
};

class ModelGradient : public ::testing::TestWithParam<GradCase> {};

// For each parameter tensor, a random unit direction u supported on it: the analytic derivative g.u must
// match (L(p + eps u) - L(p - eps u)) / (2 eps). The CPU path is f32, so the check is relative.
TEST_P(ModelGradient, MatchesCentralDifferences) {
  const GradCase c = GetParam();
  const ModelConfig cfg = small_config(c.mlp, c.n_kv_head, c.tied);
  ModelOptions opt;
  opt.checkpointing = c.ckpt;
  opt.lm_head_chunk = 5;  // several chunks, the last one partial
  const int64_t B = 2, n = 8;
  LocalModel lm(cfg, opt, B, n);
  Model& model = *lm.model;
  randomize_weights(model, 7, 0.3f);
  const Batch batch = random_batch(cfg.vocab_size, B, n, 11);
  const double count = model.global_target_count(batch);
  ASSERT_EQ(count, double(B * (n - 1)));

  std::fill_n(model.grads().ptr<float>(), model.grads().numel(), std::nanf(""));  // poison
  model.step(batch, count, true);
  const std::vector<float> grads(model.grads().ptr<float>(), model.grads().ptr<float>() + model.grads().numel());
  for (const ParamEntry& e : model.params())
    for (int64_t i = 0; i < e.numel; ++i)
      ASSERT_TRUE(std::isfinite(grads[size_t(e.offset + i)])) << e.name << "[" << i << "]";

  std::mt19937_64 rng(99);
  double worst = 0;
  for (const ParamEntry& e : model.params()) {
    const modeltest::DirectionalCheck c = modeltest::directional_check(model, batch, count, e, grads, rng, 1e-2);
    worst = std::max(worst, c.err);
    EXPECT_LT(c.err, 2e-2) << e.name << ": analytic " << c.analytic << " numeric " << c.numeric;
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Variants, ModelGradient,
    ::testing::Values(GradCase{"gelu_mha_untied", "gelu", 4, false, ActivationCheckpointing::none},
                      GradCase{"swiglu_gqa_tied", "swiglu", 2, true, ActivationCheckpointing::none},
                      GradCase{"gelu_mqa_tied_full_ckpt", "gelu", 1, true, ActivationCheckpointing::full},
                      GradCase{"swiglu_mha_untied_full_ckpt", "swiglu", 4, false, ActivationCheckpointing::full},
                      GradCase{"swiglu_gqa_untied_selective", "swiglu", 2, false, ActivationCheckpointing::selective}),
    [](const ::testing::TestParamInfo<GradCase>& info) { return std::string(info.param.name); });

TEST(Model, ActivationCheckpointingMatchesNoneBitwise) {
  const ModelConfig cfg = small_config("swiglu", 2, false);
  ModelOptions none;
  LocalModel a(cfg, none, 2, 8);
  a.model->init_weights(5);
  const Batch batch = random_batch(cfg.vocab_size, 2, 8, 3);
  const std::vector<float> la = a.model->step(batch, 14, true);
  size_t previous_bytes = a.arena->capacity();
  for (ActivationCheckpointing mode : {ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
    ModelOptions opt;
    opt.checkpointing = mode;
    LocalModel b(cfg, opt, 2, 8);
    EXPECT_LT(b.arena->capacity(), previous_bytes);  // each level saves memory
    previous_bytes = b.arena->capacity();
    b.model->init_weights(5);
    std::fill_n(b.model->grads().ptr<float>(), b.model->grads().numel(), std::nanf(""));
    EXPECT_EQ(la, b.model->step(batch, 14, true));
    const Tensor ga = a.model->grads(), gb = b.model->grads();
    ASSERT_EQ(ga.numel(), gb.numel());
    EXPECT_EQ(0, std::memcmp(ga.data, gb.data, ga.nbytes()));
  }
}

TEST(Model, InitialLossIsNearLogVocab) {
  ModelConfig cfg = small_config("gelu", 4, false);
  cfg.vocab_size = 64;
  LocalModel lm(cfg, ModelOptions{}, 2, 16);
  lm.model->init_weights(1);
  const Batch batch = random_batch(cfg.vocab_size, 2, 16, 2);
  const double loss = mean_loss(lm.model->step(batch, 30, false), 30);
  EXPECT_NEAR(loss, std::log(64.0), 0.05);
}

TEST(Model, ParamTableFollowsTheCheckpointNames) {
  const ModelConfig cfg = small_config("gelu", 2, false);
  const std::vector<ParamEntry> t = build_param_table(cfg, 1, 0);
  auto find = [&](const std::string& name) -> const ParamEntry* {
    for (const ParamEntry& e : t)
      if (e.name == name) return &e;
    return nullptr;
  };
  ASSERT_NE(find("tok_embeddings.weight"), nullptr);
  EXPECT_EQ(find("layers.1.attn.wq.weight")->full_shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(find("layers.1.attn.wk.weight")->full_shape, (std::vector<int64_t>{8, 16}));  // 2 KV heads x D=4
  EXPECT_EQ(find("layers.0.attn.wo.weight")->full_shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(find("layers.0.mlp.fc.weight")->full_shape, (std::vector<int64_t>{24, 16}));  // (out, in)
  EXPECT_EQ(find("layers.0.mlp.proj.weight")->full_shape, (std::vector<int64_t>{16, 24}));
  EXPECT_NE(find("lm_head.weight"), nullptr);
  EXPECT_NE(find("norm.weight"), nullptr);
  EXPECT_EQ(find("layers.0.mlp.w1.weight"), nullptr);
  // 2-D weights first (weight decay), norms after.
  bool seen_norm = false;
  for (const ParamEntry& e : t) {
    if (!e.decay) seen_norm = true;
    EXPECT_FALSE(seen_norm && e.decay) << e.name << " comes after a norm weight";
  }
  // V*C + L*(C*C + 2*(Hkv*D)*C + C*C + 2*F*C + 2*C) + V*C + C
  const int64_t expect = 11 * 16 + 2 * (256 + 2 * 128 + 256 + 2 * 24 * 16 + 32) + 11 * 16 + 16;
  EXPECT_EQ(count_parameters(cfg), expect);
  ModelConfig tied = cfg;
  tied.tied_embeddings = true;
  EXPECT_EQ(count_parameters(tied), expect - 11 * 16);
}

// A communicator of a given size and rank that refuses all traffic: enough to build a tp shard.
class ShapeOnlyComm final : public Comm {
 public:
  ShapeOnlyComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "shape-only"; }
  void all_reduce_sum(Tensor) override { ADD_FAILURE() << "unexpected all_reduce"; }
  void all_reduce_sum(double*, int) override { ADD_FAILURE() << "unexpected all_reduce"; }
  void broadcast(Tensor, int) override { ADD_FAILURE() << "unexpected broadcast"; }
  void barrier() override {}
  ExchangeHandle ring_exchange_start(const Tensor&, Tensor) override { return {}; }
  void wait(ExchangeHandle) override {}
  ExchangeHandle reduce_scatter_sum_start(const Tensor&, Tensor) override { return {}; }
  ExchangeHandle all_gather_start(const Tensor&, Tensor) override { return {}; }

 private:
  int rank_, size_;
};

// Each tp rank's shards are slices of the tp = 1 model's tensors: the init does not depend on the grid,
// and the shard kinds cut where DESIGN.md says (columns of wq/wk/wv/fc, rows of wo/proj, shared KV heads).
TEST(Model, TensorParallelShardsAreSlicesOfTheFullInit) {
  for (int n_kv_head : {4, 1}) {
    ModelConfig cfg = small_config("gelu", n_kv_head, false);
    LocalModel full(cfg, ModelOptions{}, 1, 4);
    full.model->init_weights(17);
    const float* fp = full.model->master().ptr<float>();
    for (int r = 0; r < 2; ++r) {
      ShapeOnlyComm tp(r, 2);
      LocalComm cp, dpcp;
      ModelComms comms;
      comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dpcp, comms.tp_rank = r;
      Arena measuring = Arena::measuring(Device::cpu());
      { Model sizing(cfg, ModelOptions{}, 1, 4, comms, measuring); }
      Arena arena(Device::cpu(), measuring.peak());
      Model shard(cfg, ModelOptions{}, 1, 4, comms, arena);
      shard.init_weights(17);
      EXPECT_EQ(shard.shape().Hl, 2);
      EXPECT_EQ(shard.shape().Hkvl, n_kv_head == 4 ? 2 : 1);
      const float* sp = shard.master().ptr<float>();
      for (const ParamEntry& e : shard.params()) {
        const ParamEntry& f = full.model->param(e.name);
        const int64_t cols = e.full_shape.back(), lc = e.col_end - e.col_begin;
        for (int64_t row = e.row_begin; row < e.row_end; ++row)
          for (int64_t col = e.col_begin; col < e.col_end; ++col)
            ASSERT_EQ(sp[e.offset + (row - e.row_begin) * lc + (col - e.col_begin)], fp[f.offset + row * cols + col])
                << e.name << " rank " << r << " (" << row << "," << col << ")";
      }
      EXPECT_EQ(shard.param("layers.0.attn.wq.weight").shard, ShardKind::column);
      EXPECT_EQ(shard.param("layers.0.attn.wo.weight").shard, ShardKind::row);
      EXPECT_EQ(shard.param("layers.0.attn.wk.weight").shard,
                n_kv_head == 4 ? ShardKind::column : ShardKind::kv_replicated);
      EXPECT_EQ(shard.param("layers.0.attn.wk.weight").owner, n_kv_head == 4 || r == 0);
      EXPECT_EQ(shard.param("norm.weight").owner, r == 0);
    }
  }
}

// A forward-only model (eval, generate) allocates no weight-gradient buffer: its measured arena is smaller than the
// training model's by at least the f32 gradients (4 bytes a parameter) at zero 0, and it still runs its forward.
TEST(Model, ForwardOnlyHoldsNoGradientBuffer) {
  const ModelConfig cfg = small_config("gelu", 4, false);
  LocalComm tp, cp, dp_cp;
  ModelComms comms;
  comms.tp = &tp, comms.cp = &cp, comms.dp_cp = &dp_cp;
  auto measured = [&](bool forward_only) {
    ModelOptions o;
    o.forward_only = forward_only;
    Arena measuring = Arena::measuring(Device::cpu());
    { Model m(cfg, o, 1, 4, comms, measuring); }
    return double(measuring.peak());
  };
  const double train = measured(false), forward = measured(true);
  LocalModel probe(cfg, ModelOptions{}, 1, 4);
  const double grad_bytes = 4.0 * double(probe.model->master().numel());
  EXPECT_LE(forward, train - grad_bytes) << "training arena " << train << " B, forward-only " << forward
                                         << " B, f32 gradients " << grad_bytes << " B";
  ModelOptions o;
  o.forward_only = true;
  Arena measuring = Arena::measuring(Device::cpu());
  { Model sizing(cfg, o, 1, 4, comms, measuring); }
  Arena arena(Device::cpu(), measuring.peak());
  Model m(cfg, o, 1, 4, comms, arena);
  EXPECT_FALSE(m.grads().defined()) << "a forward-only model should hold no gradient buffer";
}

TEST(Model, RefusesShapesThatDoNotDivide) {
  ModelConfig cfg = small_config("gelu", 4, false);
  EXPECT_THROW(make_model_shape(cfg, 3, 0, 1, 4), Error);  // 4 heads over tp=3
  cfg.n_kv_head = 3;
  EXPECT_THROW(make_model_shape(cfg, 1, 0, 1, 4), Error);  // 3 KV heads do not divide 4
  cfg = small_config("relu", 4, false);
  EXPECT_THROW(make_model_shape(cfg, 1, 0, 1, 4), Error);
}

}  // namespace
}  // namespace rt
