// parallel.cp_a2a: auto in the config and at start-up (framework/plan/a2a_auto.h): "auto" parses, prints back as
// auto, refuses 0 and negatives; resolve_cp_a2a_auto writes the pick (an integer) into the config, names each
// candidate and where its samples came from (plain causal without documents, the first training samples' documents
// with them), and leaves an integer cp_a2a alone. The decision itself: tests/unit/parallel/test_a2a_choice.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/plan/a2a_auto.h"
#include "framework/plan/plan_docs.h"
#include "kernels/tensor.h"
#include "tests/unit/test_shards.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

const char* kYaml =
    "model:\n  n_layer: 2\n  d_model: 64\n  n_head: 4\n  n_kv_head: 4\n  vocab_size: 16\n  d_ff: 64\n"
    "data:\n  source: copy\n  seq_len: 64\n"
    "parallel:\n  cp: 4\n  cp_a2a: auto\n"
    "train:\n  batch_size: 2\n  steps: 1\n"
    "optim:\n  warmup_steps: 0\n"
    "device: cpu\n";

TEST(A2aAuto, AutoParsesAndPrintsBack) {
  const Config c = parse_config_text(kYaml, {}, 0);
  EXPECT_TRUE(c.parallel.cp_a2a_auto());
  EXPECT_NE(config_to_yaml(c).find("cp_a2a: auto"), std::string::npos) << config_to_yaml(c);
  EXPECT_NE(config_table(c).find("auto"), std::string::npos);
  const Config two = parse_config_text(kYaml, {"parallel.cp_a2a=2"}, 0);
  EXPECT_EQ(two.parallel.cp_a2a, 2);
  for (const char* bad : {"parallel.cp_a2a=0", "parallel.cp_a2a=-2", "parallel.cp_a2a=automatic"}) {
    try {
      parse_config_text(kYaml, {bad}, 0);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("auto or a whole number >= 1"), std::string::npos) << e.what();
    }
  }
}

TEST(A2aAuto, ResolvesToAnIntegerFromPlainCausalSamples) {
  Config c = parse_config_text(kYaml, {}, 0);
  const std::string line = resolve_cp_a2a_auto(c);
  EXPECT_FALSE(c.parallel.cp_a2a_auto());
  EXPECT_TRUE(c.parallel.cp_a2a == 1 || c.parallel.cp_a2a == 2 || c.parallel.cp_a2a == 4) << c.parallel.cp_a2a;
  EXPECT_NE(line.find("auto -> " + std::to_string(c.parallel.cp_a2a)), std::string::npos) << line;
  for (const char* u : {"u=1 ", "u=2 ", "u=4 "}) EXPECT_NE(line.find(u), std::string::npos) << line;
  EXPECT_NE(line.find("plain causal samples of 64 tokens"), std::string::npos) << line;
  // The same pick as the decision function on one causal sample.
  const A2aChoice direct = a2a_choice_for(parse_config_text(kYaml, {}, 0), {});
  EXPECT_EQ(direct.pick, c.parallel.cp_a2a);
  EXPECT_NE(config_to_yaml(c).find("cp_a2a: " + std::to_string(c.parallel.cp_a2a)), std::string::npos);
  // An integer stays as it is, with no line.
  Config fixed = parse_config_text(kYaml, {"parallel.cp_a2a=2"}, 0);
  EXPECT_EQ(resolve_cp_a2a_auto(fixed), "");
  EXPECT_EQ(fixed.parallel.cp_a2a, 2);
  // 3 heads: no u > 1 divides them; auto picks the ring and says why.
  Config three = parse_config_text(kYaml, {"model.n_head=3", "model.n_kv_head=1", "model.d_model=48"}, 0);
  const std::string why = resolve_cp_a2a_auto(three);
  EXPECT_EQ(three.parallel.cp_a2a, 1);
  EXPECT_NE(why.find("no u > 1 is admissible"), std::string::npos) << why;
}

TEST(A2aAuto, ReadsTheFirstTrainingSamplesDocuments) {
  // An llm.c shard of documents of 1..12 tokens, each starting with token 0.
  const fs::path dir = fs::temp_directory_path() / ("rt_a2a_auto_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<uint16_t> tokens;
  for (int d = 0; tokens.size() < 4000; ++d) {
    tokens.push_back(0);
    for (int t = 0; t < d % 12; ++t) tokens.push_back(uint16_t(1 + (d + t) % 15));
  }
  const fs::path shard = dir / "docs_000.bin";
  rt::test::write_llmc_shard_u16(shard.string(), tokens);
  Config c = parse_config_text(kYaml, {"data.source=shards", "data.path=" + shard.string(), "data.documents=eot",
                                       "data.eot_token=0"}, 0);
  const std::vector<std::vector<int64_t>> starts = first_samples_doc_starts(c, kA2aAutoSamples);
  ASSERT_EQ(starts.size(), size_t(kA2aAutoSamples));
  int64_t boundaries = 0;
  for (const auto& s : starts) {
    ASSERT_EQ(s.size(), 64u);
    for (size_t p = 1; p < s.size(); ++p) boundaries += s[p] == int64_t(p);
  }
  EXPECT_GT(boundaries, 4);  // the documents are seen, not one causal sample
  const std::string line = resolve_cp_a2a_auto(c);
  EXPECT_NE(line.find("the documents of the first 4 training samples"), std::string::npos) << line;
  EXPECT_EQ(a2a_choice_for(parse_config_text(kYaml, {"data.source=shards", "data.path=" + shard.string(),
                                                     "data.documents=eot", "data.eot_token=0"}, 0),
                           starts).pick,
            c.parallel.cp_a2a);
  fs::remove_all(dir);
}

// `ringtrain plan --doc-lengths` lists every u over its windows, and its pick is the least of them.
TEST(A2aAuto, PlanDocLengthsListsEachDegree) {
  const Config c = parse_config_text(kYaml, {"data.seq_len=4096", "parallel.cp=8", "model.n_head=16",
                                             "model.n_kv_head=16", "model.d_model=256"}, 0);
  const DocLengthPlan d = doc_length_plan(c, std::string(RT_TEST_DATA_DIR) + "/python_stdlib_doc_lengths.txt", 2);
  ASSERT_EQ(d.a2a.candidates.size(), 4u);  // u = 1, 2, 4, 8
  EXPECT_EQ(d.a2a.samples, 2);
  const A2aCandidate& p = d.a2a.picked();
  for (const A2aCandidate& x : d.a2a.candidates) {
    EXPECT_TRUE(x.admissible) << x.u;
    EXPECT_LE(p.total_us(), x.total_us()) << "u=" << x.u;
  }
}

}  // namespace
}  // namespace rt
