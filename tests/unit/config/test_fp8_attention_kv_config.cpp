// fp8.attention_kv (issue 47 "Communication", RingAttention::set_kv_wire): bf16 by default; e4m3 only with
// fp8.attention, and only where the ring's K/V hops move K/V: refused, naming the key and the fix, with the gather
// scheme possible (packed documents on a ring with parallel.cp_scheme gather or auto), with parallel.cp_a2a auto, and
// with cp_a2a = cp (no ring); taken with cp_scheme ring and with a hybrid ring x all-to-all. The model options carry
// it only with fp8.attention on; the start-up precision line says it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/plan/trainer_setup.h"
#include "framework/run/precision_report.h"

namespace rt {
namespace {

// Head dim 256 / 4 = 64, FP8 linear layers and attention, CPU ranks, e4m3 K/V.
std::string yaml() {
  return "model:\n  n_layer: 2\n  d_model: 256\n  n_head: 4\n  n_kv_head: 2\n  vocab_size: 256\n  d_ff: 512\n"
         "data:\n  source: copy\n  seq_len: 512\n"
         "train:\n  batch_size: 2\n  steps: 1\n  precision: fp8\n"
         "optim:\n  warmup_steps: 0\n"
         "fp8:\n  attention: true\n  attention_kv: e4m3\n"
         "device: cpu\n";
}

// The error of parsing yaml() with `overrides` on `world` ranks, or "" when it parses.
std::string error_of(const std::vector<std::string>& overrides, int world = 0) {
  try {
    parse_config_text(yaml(), overrides, world, "fp8_attention_kv");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8AttentionKvConfig, Bf16ByDefaultE4m3TakenWithFp8Attention) {
  EXPECT_EQ(Fp8Config{}.attention_kv, "bf16");
  const Config c = parse_config_text(yaml(), {}, 0, "kv");
  EXPECT_EQ(c.fp8.attention_kv, "e4m3");
  EXPECT_TRUE(model_options(c, Device::cpu()).fp8_attention_kv);
  const Config off = parse_config_text(yaml(), {"fp8.attention_kv=bf16"}, 0, "kv");
  EXPECT_FALSE(model_options(off, Device::cpu()).fp8_attention_kv);
  const std::string e = error_of({"fp8.attention_kv=e5m2"});
  EXPECT_NE(e.find("fp8.attention_kv"), std::string::npos) << e;
  EXPECT_NE(e.find("e5m2"), std::string::npos) << e;
}

TEST(Fp8AttentionKvConfig, E4m3NeedsFp8Attention) {
  const std::string e = error_of({"fp8.attention=false"});
  EXPECT_NE(e.find("fp8.attention_kv=e4m3"), std::string::npos) << e;
  EXPECT_NE(e.find("fp8.attention=false"), std::string::npos) << e;
  EXPECT_NE(e.find("set fp8.attention: true"), std::string::npos) << e;
  EXPECT_NE(e.find("fp8.attention_kv: bf16"), std::string::npos) << e;
  EXPECT_EQ(error_of({"fp8.attention=false", "fp8.attention_kv=bf16"}), "");
}

TEST(Fp8AttentionKvConfig, RingsTakeIt) {
  EXPECT_EQ(error_of({"parallel.cp=2"}, 2), "");
  EXPECT_EQ(error_of({"parallel.cp=4", "parallel.cp_a2a=2"}, 4), "") << "a hybrid's ring sends E4M3";
}

TEST(Fp8AttentionKvConfig, RefusedWhereTheGatherSchemeMayRun) {
  const std::vector<std::string> docs = {"parallel.cp=2", "data.documents=eot"};
  for (const char* scheme : {"gather", "auto"}) {
    std::vector<std::string> o = docs;
    o.push_back(std::string("parallel.cp_scheme=") + scheme);
    const std::string e = error_of(o, 2);
    SCOPED_TRACE(scheme);
    EXPECT_NE(e.find("fp8.attention_kv=e4m3 sends K/V in E4M3 on the ring's hops only, but parallel.cp_scheme=" +
                     std::string(scheme)),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("set parallel.cp_scheme: ring, or fp8.attention_kv: bf16"), std::string::npos) << e;
  }
  std::vector<std::string> ring = docs;
  ring.push_back("parallel.cp_scheme=ring");
  const std::string e = error_of(ring, 2);
  EXPECT_EQ(e.find("fp8.attention_kv"), std::string::npos) << "the ring scheme takes it: " << e;
}

TEST(Fp8AttentionKvConfig, RefusedWithoutARing) {
  const std::string all = error_of({"parallel.cp=2", "parallel.cp_a2a=2"}, 2);
  EXPECT_NE(all.find("parallel.cp_a2a=2 = parallel.cp leaves no ring"), std::string::npos) << all;
  EXPECT_NE(all.find("fp8.attention_kv: bf16"), std::string::npos) << all;
  const std::string automatic = error_of({"parallel.cp=2", "parallel.cp_a2a=auto"}, 2);
  EXPECT_NE(automatic.find("parallel.cp_a2a=auto"), std::string::npos) << automatic;
  EXPECT_NE(automatic.find("set parallel.cp_a2a to a number"), std::string::npos) << automatic;
  EXPECT_EQ(error_of({"parallel.cp_a2a=auto"}), "") << "cp 1: nothing to pick, one rank rounds as a ring would";
}

TEST(Fp8AttentionKvConfig, StartUpLineSaysKvAreRounded) {
  const std::string on = precision_line(parse_config_text(yaml(), {}, 0, "line"), Device::cpu(), 0);
  EXPECT_NE(on.find("fp8.attention_kv: e4m3: K and V rounded to E4M3 once per layer"), std::string::npos) << on;
  const std::string off = precision_line(parse_config_text(yaml(), {"fp8.attention_kv=bf16"}, 0, "off"), Device::cpu(), 0);
  EXPECT_EQ(off.find("fp8.attention_kv"), std::string::npos) << off;
  EXPECT_NE(off.find("fp8.attention:"), std::string::npos) << off;
}

}  // namespace
}  // namespace rt
