// The graphed decode (framework/eval/decode_graph.h: one CUDA graph per step, every per-step value read from the
// device) against the ungraphed step (Model::decode_step) on a small random model, greedy, bf16 on one GPU: the
// same tokens and bit-identical logits at every step. Each run starts from an empty cache poisoned with a finite
// value (a K / V row appended in the wrong place, or a row read past the live length, changes the logits) and the
// logits are poisoned with NaN before every step (a replay that does not write them fails). The steps run the
// cache from 0 to 150 rows: past the attention kernel's 64-row tiles and split chunks; the graph is sized for the
// capacity and reads the live length on the device, so there is no bucket to cross, and capacities 160 (few splits)
// and 4096 (many splits, most of them empty) are both run. Skips only without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "framework/eval/decode_graph.h"
#include "tests/gpu/gpu_model_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

constexpr int64_t kSteps = 150;

struct DecodeRun {
  std::vector<int32_t> tokens;  // (kSteps) the token chosen after each step (the prompt's next while it lasts)
  std::vector<float> logits;    // (kSteps, V)
  bool graphed = false;
  size_t nodes = 0;
};

DecodeRun run_decode(Model& model, KvCache& cache, const std::vector<int32_t>& prompt, bool graph) {
  const int64_t V = model.shape().V;
  cache.rows = 0;
  for (size_t l = 0; l < cache.k.size(); ++l) fill(cache.k[l], 100.f), fill(cache.v[l], 100.f);
  std::vector<float> logits(static_cast<size_t>(V));  // (V)
  const Tensor host_logits(logits.data(), DType::f32, Device::cpu(), {1, V});
  int32_t token = prompt[0];
  const Tensor host_token(&token, DType::i32, Device::cpu(), {1});
  std::unique_ptr<GraphedDecode> graphed;
  if (graph) graphed = std::make_unique<GraphedDecode>(model, cache, /*required=*/true);
  DecodeRun r;
  for (int64_t pos = 0; pos < kSteps; ++pos) {
    fill(cache.logits, NAN);
    if (graphed) {
      graphed->step(token, pos);
    } else {
      copy_cast(cache.token, host_token);
      model.decode_step(cache, pos, /*append_here=*/true);
      ++cache.rows;
    }
    copy_cast(host_logits, cache.logits);
    r.logits.insert(r.logits.end(), logits.begin(), logits.end());
    int32_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[size_t(i)] > logits[size_t(best)]) best = int32_t(i);
    token = pos + 1 < int64_t(prompt.size()) ? prompt[size_t(pos + 1)] : best;
    r.tokens.push_back(token);
  }
  EXPECT_EQ(cache.rows, kSteps);
  if (graphed) r.graphed = graphed->graphed(), r.nodes = graphed->nodes();
  return r;
}

class DecodeGraph : public ::testing::TestWithParam<int64_t> {};

TEST_P(DecodeGraph, GraphedTokensAndLogitsEqualTheUngraphedStep) {
  RT_REQUIRE_CUDA();
  const int64_t capacity = GetParam();
  const Config config = gpu_model_config(1, 1, 1, "swiglu", /*n_kv_head=*/1);
  ProcessGrid grid = ProcessGrid::local();
  const Device device = Device::cuda(0);
  ModelSession session = build_session(config, ModelComms::from(grid), device, /*with_optimizer=*/false);
  Model& model = *session.model;
  model.init_weights(config.train.seed);
  model.sync_compute_weights();
  Arena measuring = Arena::measuring(device);
  model.make_kv_cache(measuring, capacity);
  Arena arena(device, measuring.peak() + 4096);
  KvCache cache = model.make_kv_cache(arena, capacity);

  const std::vector<int32_t> prompt = {3, 17, 42, 5, 9, 60, 1, 33, 21, 8, 12, 50};  // then greedy
  const DecodeRun plain = run_decode(model, cache, prompt, /*graph=*/false);
  const DecodeRun graphed = run_decode(model, cache, prompt, /*graph=*/true);

  ASSERT_TRUE(graphed.graphed) << "the decode step was not captured as a graph";
  EXPECT_GT(graphed.nodes, size_t(10)) << "the graph should hold every launch of the step";
  std::printf("capacity %lld: graph of %zu nodes; last tokens %d %d\n", (long long)capacity, graphed.nodes,
              plain.tokens.back(), graphed.tokens.back());
  ASSERT_EQ(plain.logits.size(), graphed.logits.size());
  for (size_t i = 0; i < plain.logits.size(); ++i) {
    ASSERT_TRUE(std::isfinite(plain.logits[i])) << "ungraphed logit " << i << " is " << plain.logits[i];
    ASSERT_EQ(plain.logits[i], graphed.logits[i])
        << "logit " << i % size_t(model.shape().V) << " of step " << i / size_t(model.shape().V) << " (cache length "
        << i / size_t(model.shape().V) + 1 << ")";
  }
  EXPECT_EQ(plain.tokens, graphed.tokens);
}

INSTANTIATE_TEST_SUITE_P(Capacities, DecodeGraph, ::testing::Values(int64_t(160), int64_t(4096)));

}  // namespace
}  // namespace rt::test
