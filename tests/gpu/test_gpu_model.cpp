// The whole model on the GPU (bf16 activations and compute weights, f32 masters and gradients) against the
// CPU model (f32 throughout) with the same weights and batch: the first step's loss and every gradient,
// GELU and SwiGLU (GQA), with and without activation checkpointing, and with llama3 and yarn RoPE scaling
// (the 128-token copy task runs past original_max_position_embeddings = 32; yarn scales cos and sin), and packed
// documents (document-masked attention, per-sample RoPE positions).
//
// Tolerances (bf16 rounds each activation to 2^-9 relative; two layers, GEMMs with f32 accumulation):
//   loss                         |gpu - cpu| / |cpu| <= 1e-2
//   whole gradient               ||g_gpu - g_cpu|| / ||g_cpu|| <= 3e-2
//   every gradient tensor        ||g_gpu - g_cpu|| / ||g_cpu|| <= 1e-1 (norm weights have small gradients)
// The test prints the observed values.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "framework/plan/mfu.h"
#include "tests/gpu/gpu_model_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

constexpr double kLossRelTol = 1e-2;
constexpr double kWholeGradTol = 3e-2;
constexpr double kTensorGradTol = 1e-1;

struct Case {
  const char* name;
  const char* mlp;
  int n_kv_head;
  const char* checkpointing;
  const char* rope;  // "" | llama3 | yarn
};

std::vector<std::string> rope_overrides(const std::string& rope) {
  if (rope.empty()) return {};
  std::vector<std::string> o = {"model.rope_scaling.type=" + rope, "model.rope_scaling.factor=4",
                                "model.rope_scaling.original_max_position_embeddings=32"};
  if (rope == "llama3") o.push_back("model.rope_scaling.high_freq_factor=4");
  return o;
}

class GpuModel : public ::testing::TestWithParam<Case> {};

TEST_P(GpuModel, FirstStepMatchesCpuModel) {
  RT_REQUIRE_CUDA();
  const Case c = GetParam();
  const Config config = gpu_model_config(1, 1, 1, c.mlp, c.n_kv_head, c.checkpointing, rope_overrides(c.rope));
  ProcessGrid grid = ProcessGrid::local();
  const StepResult gpu = first_step(config, grid, Device::cuda(0));
  const StepResult cpu = first_step(config, grid, Device::cpu());

  ASSERT_TRUE(std::isfinite(gpu.loss)) << "GPU loss " << gpu.loss;
  ASSERT_GT(cpu.loss, 1.0) << "the CPU reference loss should be near log(vocab) at init";
  const double loss_err = std::abs(gpu.loss - cpu.loss) / std::abs(cpu.loss);
  EXPECT_LE(loss_err, kLossRelTol) << "loss gpu " << gpu.loss << " cpu " << cpu.loss;

  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    ASSERT_EQ(gpu.grads[i].name, cpu.grads[i].name);
    double norm = 0;
    for (float x : cpu.grads[i].values) norm += double(x) * x;
    ASSERT_GT(norm, 0) << cpu.grads[i].name << ": zero reference gradient proves nothing";
    const double e = rel_norm_diff(gpu.grads[i].values, cpu.grads[i].values);
    EXPECT_LE(e, kTensorGradTol) << "gradient " << cpu.grads[i].name;
  }
  const GradCompare g = compare_grads(gpu.grads, cpu.grads);
  EXPECT_LE(g.whole, kWholeGradTol);
  std::printf("[ %s ] loss cpu %.5f gpu %.5f (rel %.1e) | grad rel err whole %.1e, worst %.1e (%s)\n", c.name,
              cpu.loss, gpu.loss, loss_err, g.whole, g.worst, g.worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(Variants, GpuModel,
                         ::testing::Values(Case{"gelu_mha", "gelu", 2, "none", ""},
                                           Case{"swiglu_gqa_full_ckpt", "swiglu", 1, "full", ""},
                                           Case{"gelu_selective_ckpt", "gelu", 2, "selective", ""},
                                           Case{"swiglu_gqa_llama3", "swiglu", 1, "none", "llama3"},
                                           Case{"swiglu_yarn_selective", "swiglu", 2, "selective", "yarn"}),
                         [](const auto& info) { return std::string(info.param.name); });

// Packed documents (data.documents: eot, positions restarting per document) through the whole model on CUDA: the
// document-masked attention, the per-sample RoPE table and the dropped boundary targets, against the CPU model.
// Documents of 1 to 150 tokens in 128-token samples: some shorter than a 64-row tile, some crossing samples.
TEST(GpuModelDocuments, FirstStepMatchesCpuModel) {
  RT_REQUIRE_CUDA();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rt_gpu_model_docs_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string shard = (dir / "docs_000.bin").string();
  write_packed_document_shard(shard, /*eot=*/0);
  for (const char* mlp : {"gelu", "swiglu"}) {
    const Config config = gpu_model_config(1, 1, 1, mlp, 1, "selective",
                                           {"data.source=shards", "data.path=" + shard, "data.documents=eot",
                                            "data.eot_token=0", "data.positions=document"});
    ProcessGrid grid = ProcessGrid::local();
    const StepResult gpu = first_step(config, grid, Device::cuda(0));
    const StepResult cpu = first_step(config, grid, Device::cpu());
    ASSERT_TRUE(std::isfinite(gpu.loss)) << mlp << ": GPU loss " << gpu.loss;
    ASSERT_GT(cpu.loss, 1.0) << mlp;
    const double loss_err = std::abs(gpu.loss - cpu.loss) / std::abs(cpu.loss);
    EXPECT_LE(loss_err, kLossRelTol) << mlp << ": loss gpu " << gpu.loss << " cpu " << cpu.loss;
    const GradCompare g = compare_grads(gpu.grads, cpu.grads);
    EXPECT_LE(g.whole, kWholeGradTol) << mlp;
    EXPECT_LE(g.worst, kTensorGradTol) << mlp << ": " << g.worst_name;
    std::printf("[ documents %s ] loss cpu %.5f gpu %.5f (rel %.1e) | grad rel err whole %.1e, worst %.1e (%s)\n",
                mlp, cpu.loss, gpu.loss, loss_err, g.whole, g.worst, g.worst_name.c_str());
  }
  fs::remove_all(dir);
}

// precision fp8 on the GPU against the CPU backend's FP8 (which rounds to E4M3 exactly as the GPU does and sums in
// f32), per recipe, at a shape whose GEMMs reduce over 512-2,048 elements and whose weight gradients over 2,048 tokens
// (a 128-wide toy hides what a per-row or per-block factor applied to the wrong rows would do to a long sum). Both sides
// quantize their own activations (bf16 on the GPU, f32 on the CPU), so some values round to the neighbouring E4M3 code
// (a step of 2^-3 relative); with fast accumulation in the GPU's forward GEMMs too, the recipes agree with the CPU to
// a few 1e-2, and a recipe whose factors were misapplied would miss by O(1). Each recipe is also held to within 3x the
// tensorwise recipe's gradient error + 2e-2, so one recipe far worse than the others shows (the rowwise loss gap on
// the GPU that the CPU does not show: bench/NOTES.md "Rowwise's loss gap").
// Bounds: loss 2e-2 relative, whole gradient 1.5e-1, every tensor 4e-1. The test prints what it sees.
TEST(GpuModelFp8, FirstStepMatchesTheCpuFp8PerRecipe) {
  RT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const int sm = compute_capability(gpu);
  if (sm < 89) GTEST_SKIP() << "precision fp8 needs FP8 tensor cores (sm_" << sm << ")";
  const std::vector<std::string> shape = {"model.d_model=512", "model.n_head=4", "model.n_kv_head=2",
                                          "model.d_ff=2048", "data.seq_len=1024", "train.lm_head_chunk=512"};
  double tensorwise_grad = -1;
  for (const char* recipe : {"tensorwise", "rowwise", "block"}) {
    if (std::string(recipe) == "block" && sm < 90) continue;  // cuBLASLt's block scalings are sm_90 only
    std::vector<std::string> o = shape;
    o.push_back("train.precision=fp8");
    o.push_back(std::string("fp8.recipe=") + recipe);
    const Config config = gpu_model_config(1, 1, 1, "swiglu", 2, "none", o);
    ProcessGrid grid = ProcessGrid::local();
    const StepResult got = first_step(config, grid, gpu);
    const StepResult ref = first_step(config, grid, Device::cpu());
    ASSERT_TRUE(std::isfinite(got.loss)) << recipe << ": GPU loss " << got.loss;
    const double loss_err = std::abs(got.loss - ref.loss) / std::abs(ref.loss);
    const GradCompare g = compare_grads(got.grads, ref.grads);
    std::printf("[ fp8 %s ] loss cpu %.5f gpu %.5f (rel %.1e) | grad rel err whole %.2e, worst %.2e (%s)\n", recipe,
                ref.loss, got.loss, loss_err, g.whole, g.worst, g.worst_name.c_str());
    EXPECT_LE(loss_err, 2e-2) << recipe;
    EXPECT_LE(g.whole, 1.5e-1) << recipe;
    EXPECT_LE(g.worst, 4e-1) << recipe << ": " << g.worst_name;
    if (tensorwise_grad < 0) tensorwise_grad = g.whole;
    else EXPECT_LE(g.whole, 3 * tensorwise_grad + 2e-2) << recipe << " against tensorwise's " << tensorwise_grad;
  }
}

}  // namespace
}  // namespace rt::test
