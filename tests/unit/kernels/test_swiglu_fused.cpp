// SwiGLU's gate and up projections run as one gemm against the (2Fl, C) span [w1; w3] of the flat buffers
// (framework/model/model.cpp layer_weights). These tests pin what that relies on: build_param_layout keeps w3 right after
// w1 on every tp rank and shard count, also where Fl * C is not a multiple of the 64-element alignment, with every
// other parameter still aligned; and the model's gradient on such an unaligned shape matches central differences
// for w1, w3 and w2 separately (a swapped or shifted gate|up half would not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tests/unit/test_model_util.h"

namespace rt {
namespace {

using modeltest::LocalModel;
using modeltest::random_batch;
using modeltest::randomize_weights;
using modeltest::small_config;

TEST(SwigluFused, GateAndUpAreOneSpanOnEveryRankAndShardCount) {
  for (int d_ff : {24, 22}) {  // F * C = 384 (aligned) and 352 (not a multiple of 64)
    ModelConfig cfg = small_config("swiglu", 2, false);
    cfg.d_ff = d_ff;
    for (int tp : {1, 2})
      for (int tp_rank = 0; tp_rank < tp; ++tp_rank)
        for (int shards : {1, 3}) {
          const ParamLayout layout = build_param_layout(cfg, tp, tp_rank, shards);
          auto find = [&](const std::string& name) -> const ParamEntry& {
            for (const ParamEntry& e : layout.table)
              if (e.name == name) return e;
            ADD_FAILURE() << "no " << name;
            return layout.table.front();
          };
          for (int l = 0; l < cfg.n_layer; ++l) {
            const std::string p = "layers." + std::to_string(l) + ".mlp.";
            const ParamEntry &w1 = find(p + "w1.weight"), &w3 = find(p + "w3.weight");
            EXPECT_EQ(w3.offset, w1.offset + w1.numel) << p << " tp " << tp << "/" << tp_rank << " shards " << shards;
            EXPECT_EQ(w1.unit, w3.unit);
            EXPECT_EQ(w1.local_shape, w3.local_shape);
            EXPECT_EQ(w1.local_shape, (std::vector<int64_t>{d_ff / tp, cfg.d_model}));
          }
          for (const ParamEntry& e : layout.table) {
            if (e.name.find(".mlp.w3.") == std::string::npos) {
              EXPECT_EQ(e.offset % 64, 0) << e.name;
            }
          }
          for (const ParamUnit& u : layout.units) EXPECT_EQ(u.numel % (64 * shards), 0) << u.name;
          // Parameters never overlap: each ends at or before the next one in flat order.
          std::vector<const ParamEntry*> order;
          for (const ParamEntry& e : layout.table) order.push_back(&e);
          std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
          for (size_t k = 0; k + 1 < order.size(); ++k)
            EXPECT_LE(order[k]->offset + order[k]->numel, order[k + 1]->offset) << order[k]->name;
          EXPECT_LE(order.back()->offset + order.back()->numel, layout.total);
        }
  }
}

// The gradient of the fused MLP on the unaligned shape, each MLP weight of each layer checked on its own against
// (L(p + eps u) - L(p - eps u)) / (2 eps) along a random unit direction u, under none and full checkpointing
// (the recompute runs the fused gemm again).
TEST(SwigluFused, GradientMatchesCentralDifferencesOnAnUnalignedShape) {
  ModelConfig cfg = small_config("swiglu", 2, false);
  cfg.d_ff = 22;
  for (ActivationCheckpointing ckpt : {ActivationCheckpointing::none, ActivationCheckpointing::full}) {
    ModelOptions opt;
    opt.checkpointing = ckpt;
    opt.mlp_chunk = 5;  // chunks of rows, the last one partial
    const int64_t B = 2, n = 8;
    LocalModel lm(cfg, opt, B, n);
    Model& model = *lm.model;
    randomize_weights(model, 7, 0.3f);
    const Batch batch = random_batch(cfg.vocab_size, B, n, 11);
    const double count = model.global_target_count(batch);
    std::fill_n(model.grads().ptr<float>(), model.grads().numel(), std::nanf(""));  // poison
    model.step(batch, count, true);
    const std::vector<float> grads(model.grads().ptr<float>(), model.grads().ptr<float>() + model.grads().numel());
    for (const ParamEntry& e : model.params())
      for (int64_t i = 0; i < e.numel; ++i)
        ASSERT_TRUE(std::isfinite(grads[size_t(e.offset + i)])) << e.name << "[" << i << "]";
    std::mt19937_64 rng(99);
    for (const ParamEntry& e : model.params()) {
      if (e.name.find(".mlp.w") == std::string::npos) continue;
      const modeltest::DirectionalCheck c = modeltest::directional_check(model, batch, count, e, grads, rng, 1e-2);
      EXPECT_LT(c.err, 2e-2) << e.name << " ckpt " << int(ckpt) << ": analytic " << c.analytic << " numeric "
                             << c.numeric;
    }
  }
}

}  // namespace
}  // namespace rt
