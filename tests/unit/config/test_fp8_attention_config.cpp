// fp8.attention (kernels/attn_fp8.h, issue 47): off by default; refused without train.precision fp8, at head dims
// other than 64 and 128 (naming the dimension and the fix), and on a GPU outside the sm_90a kernel's scope
// (fp8_attention_cuda_refusal: packed documents, head_dim != 128, seq_len / cp not a multiple of 128):
// device: cuda by validate_config, device: auto that lands on a GPU by the resolve step (train refuses, plan shows a
// row); the start-up precision line and the plan say what it does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/plan/resolve.h"
#include "framework/plan/trainer_setup.h"
#include "framework/run/precision_report.h"

namespace rt {
namespace {

// Head dim 256 / 4 = 64, FP8 linear layers, CPU ranks.
std::string yaml() {
  return "model:\n  n_layer: 2\n  d_model: 256\n  n_head: 4\n  n_kv_head: 2\n  vocab_size: 256\n  d_ff: 512\n"
         "data:\n  source: copy\n  seq_len: 256\n"
         "train:\n  batch_size: 2\n  steps: 1\n  precision: fp8\n"
         "optim:\n  warmup_steps: 0\n"
         "fp8:\n  attention: true\n"
         "device: cpu\n";
}

// The error of parsing yaml() with `overrides`, or "" when it parses.
std::string error_of(const std::vector<std::string>& overrides) {
  try {
    parse_config_text(yaml(), overrides, 0, "fp8_attention");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8AttentionConfig, OffByDefaultAndTakenOnCpuRanks) {
  EXPECT_FALSE(Fp8Config{}.attention);
  const Config c = parse_config_text(yaml(), {}, 0, "fp8_attention");
  EXPECT_TRUE(c.fp8.attention);
  EXPECT_FALSE(parse_config_text(yaml(), {"fp8.attention=false"}, 0, "off").fp8.attention);
  EXPECT_NE(error_of({"fp8.attention=sometimes"}).find("fp8.attention"), std::string::npos);
  // head dim 128 is taken too.
  EXPECT_EQ(error_of({"model.d_model=512"}), "");
}

TEST(Fp8AttentionConfig, NeedsFp8Precision) {
  const std::string e = error_of({"train.precision=bf16"});
  EXPECT_NE(e.find("fp8.attention=true"), std::string::npos) << e;
  EXPECT_NE(e.find("train.precision=bf16"), std::string::npos) << e;
  EXPECT_NE(e.find("set train.precision: fp8"), std::string::npos) << e;
  EXPECT_EQ(error_of({"train.precision=bf16", "fp8.attention=false"}), "");
}

TEST(Fp8AttentionConfig, RefusesHeadDimsOtherThan64And128) {
  for (const char* d_model : {"model.d_model=128", "model.d_model=384", "model.d_model=1024"}) {
    const std::string e = error_of({d_model});
    SCOPED_TRACE(d_model);
    EXPECT_NE(e.find("fp8.attention=true takes head dims 64 and 128"), std::string::npos) << e;
    EXPECT_NE(e.find(" = " + std::to_string(std::stoi(std::string(d_model).substr(14)) / 4) + ";"), std::string::npos)
        << e;
    EXPECT_NE(e.find("fp8.attention: false"), std::string::npos) << e;
  }
}

// How many times `needle` occurs in `text`.
size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

const char* const kGpuScope = "fp8.attention=true on the GPU runs the sm_90a FP8 attention backward";

// device: cuda takes the kernel's scope (head dim 128, no documents, seq_len / cp a multiple of 128: the ring's blocks
// included).
TEST(Fp8AttentionConfig, TakenOnCudaInTheKernelsScope) {
  // (A build without CUDA refuses device: cuda itself; the fp8.attention refusal is not among its problems.)
  EXPECT_EQ(error_of({"device=cuda", "model.d_model=512"}).find(kGpuScope), std::string::npos);
  Config c = parse_config_text(yaml(), {"model.d_model=512"}, 0, "cuda");
  c.device = "cuda";
  EXPECT_EQ(fp8_attention_cuda_refusal(c), "");
  c.parallel.cp = 2;  // 128 rows per rank: the ring's blocks are in the kernel's scope
  EXPECT_EQ(fp8_attention_cuda_refusal(c), "");
  // Off: nothing to refuse, whatever the shape.
  EXPECT_EQ(fp8_attention_cuda_refusal(parse_config_text(yaml(), {"fp8.attention=false"}, 0, "off")), "");
}

// Outside it, one refusal that names every key outside the scope and the fixes.
TEST(Fp8AttentionConfig, RefusedOnCudaOutsideTheKernelsScope) {
  {
    const std::string e = error_of({"device=cuda"});  // head dim 256 / 4 = 64
    EXPECT_NE(e.find(kGpuScope), std::string::npos) << e;
    EXPECT_NE(e.find("head_dim=64 (model.d_model / model.n_head = 256 / 4)"), std::string::npos) << e;
    EXPECT_NE(e.find("set fp8.attention: false"), std::string::npos) << e;
    EXPECT_NE(e.find("device: cpu"), std::string::npos) << e;
    EXPECT_EQ(count_of(e, kGpuScope), 1u) << e;  // printed once
    EXPECT_EQ(e.find("parallel.cp="), std::string::npos) << e;
  }
  const Config base = parse_config_text(yaml(), {"model.d_model=512"}, 0, "base");
  {
    Config c = base;
    c.device = "cuda";
    c.parallel.cp = 4;  // 64 rows per rank
    const std::string e = fp8_attention_cuda_refusal(c);
    EXPECT_NE(e.find("data.seq_len=256 (not a multiple of 128 x parallel.cp=4: each rank's rows)"), std::string::npos)
        << e;
    EXPECT_EQ(e.find("head_dim="), std::string::npos) << e;
  }
  {
    Config c = base;
    c.data.documents = "eot";
    const std::string e = fp8_attention_cuda_refusal(c);
    EXPECT_NE(e.find("data.documents=eot (a document mask)"), std::string::npos) << e;
  }
  {
    Config c = base;
    c.data.seq_len = 200;
    const std::string e = fp8_attention_cuda_refusal(c);
    EXPECT_NE(e.find("data.seq_len=200 (not a multiple of 128)"), std::string::npos) << e;
  }
  {
    Config c = base;  // everything at once: one message naming all of it
    c.parallel.cp = 4, c.data.documents = "eot", c.model.d_model = 256;
    const std::string e = fp8_attention_cuda_refusal(c);
    EXPECT_EQ(count_of(e, kGpuScope), 1u) << e;
    for (const char* key : {"parallel.cp=4", "data.documents=eot", "head_dim=64", "data.seq_len=256"})
      EXPECT_NE(e.find(key), std::string::npos) << key << ": " << e;
  }
  // CPU ranks take all of these (the CPU backend's FP8 backward has ranges, documents and head dim 64).
  EXPECT_EQ(error_of({"device=cpu"}), "");
}

// device: auto: where it lands on a GPU the train start-up refuses a config outside the kernel's scope (a plan shows
// it as a row) and takes one inside it; CPU ranks take either.
TEST(Fp8AttentionConfig, AutoDeviceCheckedAtStartUpOnAGpu) {
  const Config c = parse_config_text(yaml(), {"device=auto"}, 0, "auto");  // head dim 64
  const Config in_scope = parse_config_text(yaml(), {"device=auto", "model.d_model=512"}, 0, "auto128");
  if (resolve_device(c).is_cuda()) {
    try {
      (void)resolve_autos(c, Purpose::train);
      ADD_FAILURE() << "fp8.attention at head dim 64 on a GPU was accepted at start-up";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(kGpuScope), std::string::npos) << e.what();
    }
    const Resolved plan = resolve_autos(c, Purpose::plan);
    EXPECT_NE(plan.table().find("fp8.attention: true -> refused on this GPU at start-up"), std::string::npos)
        << plan.table();
    const Resolved r = resolve_autos(in_scope, Purpose::train);
    EXPECT_EQ(r.table().find("fp8.attention"), std::string::npos) << r.table();
  } else {
    for (const Config* each : {&c, &in_scope}) {
      const Resolved r = resolve_autos(*each, Purpose::train);
      EXPECT_TRUE(r.device.is_cpu());
      EXPECT_EQ(r.table().find("fp8.attention"), std::string::npos) << r.table();
    }
  }
}

TEST(Fp8AttentionConfig, StartUpLineSaysWhatRunsInFp8) {
  const Config c = parse_config_text(yaml(), {}, 0, "line");
  const std::string on = precision_line(c, Device::cpu(), 0);
  EXPECT_NE(on.find("fp8.attention: the attention backward's dV, dQ, dK on E4M3 operands"), std::string::npos) << on;
  EXPECT_NE(on.find("its forward and dP stay f32"), std::string::npos) << on;
  const std::string gpu = precision_line(c, Device::cuda(0), 0);
  EXPECT_NE(gpu.find("its forward and dP stay bf16; the sm_90a kernel over each whole sequence"), std::string::npos)
      << gpu;
  const std::string off = precision_line(parse_config_text(yaml(), {"fp8.attention=false"}, 0, "off"), Device::cpu(), 0);
  EXPECT_EQ(off.find("fp8.attention"), std::string::npos) << off;
}

}  // namespace
}  // namespace rt
