// The bytes the ring moves, through the real binary on 2 CPU ranks (cp = 2): with packed short documents and the
// contiguous layout no query of rank 0 sees rank 1's keys, so block 1 never travels and its dK/dV never come back;
// the start-up line names the first sample's ring order and the bytes per layer against the full ring's, and every
// logged step's metrics.jsonl holds rank 0's ring_sent_bytes_per_layer below ring_full_bytes_per_layer. Without
// documents every hop runs: the two are equal (so the comparison can fail). With parallel.cp_scheme: gather rank 1
// receives only the rows of the document across the ranks' edge, fewer bytes than the ring's whole block; auto names
// its predictions on the start-up line.
#include "tests/mpi/run_job_util.h"

namespace {

using rt::test::ProcessResult;
namespace fs = std::filesystem;

class TrainRingBytes : public rt::test::RunJobTest {
 protected:
  // An llm.c shard of documents of 2..13 tokens, each starting with token 0 (the EOT).
  std::string documents_shard() {
    std::vector<uint16_t> tokens;
    for (int d = 0; tokens.size() < 6000; ++d) {
      tokens.push_back(0);
      for (int t = 0; t < 1 + (d * 7) % 12; ++t) tokens.push_back(uint16_t(1 + (d * 5 + t * 3) % 15));
    }
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 1, header[2] = int32_t(tokens.size());
    const fs::path path = dir_ / "docs_000.bin";
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
    return path.string();
  }
  // Each logged step's cp_scheme_gather (1: the gather scheme ran) from metrics.jsonl.
  std::vector<double> logged_schemes(const fs::path& metrics) {
    std::vector<double> out;
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("loss")) out.push_back(j.contains("cp_scheme_gather") ? j["cp_scheme_gather"].get<double>() : -1);
    }
    return out;
  }
  // Each logged step's (sent, full) bytes per layer from metrics.jsonl.
  std::vector<std::pair<double, double>> logged_bytes(const fs::path& metrics) {
    std::vector<std::pair<double, double>> out;
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("loss")) continue;
      EXPECT_TRUE(j.contains("ring_sent_bytes_per_layer") && j.contains("ring_full_bytes_per_layer")) << line;
      if (j.contains("ring_sent_bytes_per_layer") && j.contains("ring_full_bytes_per_layer"))
        out.push_back({j["ring_sent_bytes_per_layer"].get<double>(), j["ring_full_bytes_per_layer"].get<double>()});
    }
    return out;
  }
};

TEST_F(TrainRingBytes, ShortDocumentsMoveFewerBytesThanTheRing) {
  const std::string shard = documents_shard();
  const fs::path docs = dir_ / "docs", plain = dir_ / "plain";
  const std::string cfg = config("c.yaml", docs.string());
  const std::string opts = " --set train.steps=3 --set checkpoint.every=0 --set checkpoint.save_final=false";
  ProcessResult r = bash("$TRAIN " + cfg + opts + " --set data.source=shards --set data.path=" + shard +
                         " --set data.documents=eot --set data.eot_token=0 --set parallel.layout=contiguous"
                         " --set parallel.cp_scheme=ring");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(rt::test::count_of(r.output, "documents: first sample's ring order contiguous, scheme ring; its batch moves "), 1u)
      << r.output;
  EXPECT_NE(r.output.find("of the full ring's"), std::string::npos) << r.output;
  const auto with_docs = logged_bytes(docs / "metrics.jsonl");
  ASSERT_EQ(with_docs.size(), 3u);
  for (const auto& [sent, full] : with_docs) {
    EXPECT_GT(sent, 0.0);
    EXPECT_LT(sent, full) << "rank 0's block is needed by rank 1, but rank 1's by nobody";
  }

  r = bash("$TRAIN " + config("p.yaml", plain.string()) + opts);  // the copy task: no documents, every hop
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("first sample's ring order"), std::string::npos) << r.output;
  const auto without = logged_bytes(plain / "metrics.jsonl");
  ASSERT_EQ(without.size(), 3u);
  for (const auto& [sent, full] : without) {
    EXPECT_GT(full, 0.0);
    EXPECT_EQ(sent, full);
  }
}

TEST_F(TrainRingBytes, GatherSendsOnlyTheRowsQueriesSee) {
  const std::string shard = documents_shard();
  const std::string opts = " --set train.steps=3 --set checkpoint.every=0 --set checkpoint.save_final=false"
                           " --set data.source=shards --set data.path=" + shard +
                           " --set data.documents=eot --set data.eot_token=0 --set parallel.layout=contiguous";
  const fs::path ring = dir_ / "ring", gather = dir_ / "gather", automatic = dir_ / "auto";
  ProcessResult r = bash("$TRAIN " + config("r.yaml", ring.string()) + opts + " --set parallel.cp_scheme=ring");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = bash("$TRAIN " + config("g.yaml", gather.string()) + opts + " --set parallel.cp_scheme=gather");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cp_scheme=gather"), std::string::npos) << r.output;
  EXPECT_EQ(rt::test::count_of(r.output, "documents: first sample's ring order contiguous, scheme gather; its batch "
                                         "moves "),
            1u)
      << r.output;
  const auto by_ring = logged_bytes(ring / "metrics.jsonl"), by_gather = logged_bytes(gather / "metrics.jsonl");
  ASSERT_EQ(by_ring.size(), 3u);
  ASSERT_EQ(by_gather.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_GT(by_gather[i].first, 0.0) << "a document crosses the ranks' edge: some row is sent";
    EXPECT_LT(by_gather[i].first, by_ring[i].first) << "step " << i + 1 << ": the rows, not the whole block";
    EXPECT_EQ(by_gather[i].second, by_ring[i].second) << "the same full ring to compare with";
  }
  for (double g : logged_schemes(gather / "metrics.jsonl")) EXPECT_EQ(g, 1.0);
  for (double g : logged_schemes(ring / "metrics.jsonl")) EXPECT_EQ(g, 0.0);

  r = bash("$TRAIN " + config("a.yaml", automatic.string()) + opts + " --set parallel.cp_scheme=auto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" (auto: predicted ring "), std::string::npos) << r.output;
  EXPECT_EQ(logged_schemes(automatic / "metrics.jsonl").size(), 3u);
}

}  // namespace
