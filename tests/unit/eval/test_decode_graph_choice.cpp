// generate --cuda-graph (framework/eval/decode_graph.h): the three settings are accepted and any other value is
// refused naming them; CPU ranks and multi-rank grids decode ungraphed under every setting (the start-up line says
// why), one CUDA rank decodes graphed unless off. And the graphed step's body on the CPU: decode_step_from_inputs,
// with every per-step value written by decode_step_inputs into the device buffer (the append row read there),
// gives decode_step's logits bit for bit, step after step.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "framework/eval/decode_graph.h"
#include "kernels/ops.h"
#include "tests/unit/test_model_util.h"

namespace rt {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(DecodeGraphChoice, AcceptsAutoOnOffAndRefusesAnythingElseNamingThem) {
  for (const char* ok : {"auto", "on", "off"}) EXPECT_EQ(check_cuda_graph_setting(ok), "") << ok;
  for (const char* bad : {"", "yes", "true", "ON", "1"}) {
    const std::string why = check_cuda_graph_setting(bad);
    EXPECT_TRUE(contains(why, "--cuda-graph auto") && contains(why, " on ") && contains(why, " off "))
        << "'" << bad << "': " << why;
  }
}

TEST(DecodeGraphChoice, CpuRanksDecodeUngraphedUnderEverySetting) {
  for (const char* setting : {"auto", "on", "off"}) {
    const DecodeGraphChoice c = choose_decode_graph(setting, /*cuda=*/false, /*ranks=*/1);
    EXPECT_FALSE(c.graphed) << setting;
    EXPECT_TRUE(contains(c.line, "ungraphed")) << c.line;
    if (std::string(setting) != "off") {
      EXPECT_TRUE(contains(c.line, "CPU")) << c.line;
    }
  }
}

TEST(DecodeGraphChoice, OneCudaRankIsGraphedUnlessOffAndGridsFallBack) {
  EXPECT_TRUE(choose_decode_graph("auto", true, 1).graphed);
  EXPECT_TRUE(choose_decode_graph("on", true, 1).graphed);
  EXPECT_FALSE(choose_decode_graph("off", true, 1).graphed);
  for (const char* setting : {"auto", "on"}) {
    const DecodeGraphChoice c = choose_decode_graph(setting, true, 4);
    EXPECT_FALSE(c.graphed) << setting;
    EXPECT_TRUE(contains(c.line, "ungraphed") && contains(c.line, "4 ranks")) << c.line;
  }
  EXPECT_TRUE(contains(choose_decode_graph("auto", true, 1).line, "one CUDA graph per step"));
}

TEST(DecodeFromDeviceInputs, CpuLogitsEqualDecodeStepEveryStep) {
  ModelOptions options;
  options.forward_only = true;
  const ModelConfig config = modeltest::small_config("swiglu", 2, false);
  modeltest::LocalModel a(config, options, 1, 8);
  Model& model = *a.model;
  modeltest::randomize_weights(model, 7, 0.5f);
  model.sync_compute_weights();
  constexpr int64_t kCapacity = 40, kSteps = 33;
  Arena measuring = Arena::measuring(Device::cpu());
  model.make_kv_cache(measuring, kCapacity);
  Arena arena(Device::cpu(), 2 * measuring.peak() + 4096);  // two caches
  KvCache plain = model.make_kv_cache(arena, kCapacity);
  KvCache from_inputs = model.make_kv_cache(arena, kCapacity);
  const int64_t V = model.shape().V;
  std::vector<char> staging(from_inputs.step_inputs.nbytes());
  int32_t token = 4;
  for (int64_t pos = 0; pos < kSteps; ++pos) {
    *plain.token.ptr<int32_t>() = token;
    model.decode_step(plain, pos, /*append_here=*/true);
    ++plain.rows;
    fill(from_inputs.logits, 1e30f);  // the step must write them
    model.decode_step_inputs(staging.data(), from_inputs, token, pos, int32_t(from_inputs.rows + 1),
                             int32_t(from_inputs.rows));
    std::memcpy(from_inputs.step_inputs.data, staging.data(), staging.size());
    model.decode_step_from_inputs(from_inputs);
    ++from_inputs.rows;
    const float* p = plain.logits.ptr<float>();
    const float* q = from_inputs.logits.ptr<float>();
    int32_t best = 0;
    for (int64_t i = 0; i < V; ++i) {
      ASSERT_EQ(p[i], q[i]) << "step " << pos << " logit " << i;
      if (p[i] > p[best]) best = int32_t(i);
    }
    token = pos % 3 == 0 ? int32_t((pos * 5 + 1) % V) : best;  // a mix of forced and greedy tokens
  }
  // A negative append row writes nowhere: the step attends over the rows it has.
  model.decode_step_inputs(staging.data(), from_inputs, token, kSteps, int32_t(from_inputs.rows), -1);
  std::memcpy(from_inputs.step_inputs.data, staging.data(), staging.size());
  const float* k0 = from_inputs.k[0].ptr<float>();  // (capacity, Hkvl*D)
  const std::vector<float> before(k0, k0 + from_inputs.k[0].numel());
  model.decode_step_from_inputs(from_inputs);
  const std::vector<float> after(k0, k0 + from_inputs.k[0].numel());
  EXPECT_EQ(before, after);
}

}  // namespace
}  // namespace rt
