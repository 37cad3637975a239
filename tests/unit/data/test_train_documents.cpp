// Packed documents through the trainer (train_main, one CPU rank): every logged step's JSONL says how many
// targets were in the loss and how many boundary targets (the EOT predicted from the previous document) were
// left out; MFU counts the step's visible (query, key) pairs, not T/2 per token; eval reports the same counts
// for its held-out batches. The expected numbers are computed here from the loader's tokens alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/plan/mfu.h"
#include "framework/run/trainer.h"

namespace rt {
namespace {
namespace fs = std::filesystem;

constexpr int kEot = 0;

// An llm.c shard of documents of 1..29 tokens, each starting with kEot.
std::string write_documents_shard(const fs::path& dir) {
  std::vector<uint16_t> tokens;
  for (int d = 0; tokens.size() < 20000; ++d) {
    tokens.push_back(kEot);
    for (int t = 0; t < 1 + (d * 11) % 29; ++t) tokens.push_back(uint16_t(1 + (d * 5 + t * 3) % 23));
  }
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = int32_t(tokens.size());
  const std::string path = (dir / "docs_000.bin").string();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  return path;
}

struct Counts {
  double targets = 0, dropped = 0, pairs = 0;
};

// From the batch's tokens only (cp = 1: the batch is whole samples in order): a target at p is dropped iff
// token p+1 is an EOT; query p sees the keys from its document's start to p.
Counts counts_of(const Batch& b) {
  Counts c;
  const int64_t T = b.tokens_per_rank;
  for (int64_t s = 0; s < b.batch; ++s) {
    int64_t start = 0;
    for (int64_t p = 0; p < T; ++p) {
      const size_t k = size_t(s * T + p);
      if (p > 0 && b.tokens[k] == kEot) start = p;
      c.pairs += double(p - start + 1);
      if (p + 1 < T && b.tokens[k + 1] == kEot) c.dropped += 1;
      if (b.targets[k] >= 0) c.targets += 1;
    }
  }
  return c;
}

TEST(TrainDocuments, LogsTargetCountsAndCountsVisiblePairsInMfu) {
  const fs::path dir = fs::temp_directory_path() / ("rt_train_documents_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string shard = write_documents_shard(dir);
  const int steps = 3, B = 2, T = 64;
  std::ostringstream y;
  y << "model:\n  n_layer: 2\n  d_model: 32\n  n_head: 4\n  n_kv_head: 2\n  vocab_size: 24\n  mlp: gelu\n"
    << "  d_ff: 48\n  tied_embeddings: true\n"
    << "data:\n  source: shards\n  path: " << shard << "\n  documents: eot\n  eot_token: " << kEot
    << "\n  positions: document\n  seq_len: " << T << "\n  seed: 3\n"
    << "train:\n  batch_size: " << B << "\n  steps: " << steps << "\n  eval_every: " << steps
    << "\n  eval_batches: 2\n  seed: 5\n  run_dir: " << (dir / "run").string() << "\n"
    << "checkpoint:\n  save_final: false\n"
    << "optim:\n  lr: 0.01\n  warmup_steps: 1\n"
    << "log:\n  every: 1\n  peak_tflops: 1\n"
    << "device: cpu\n";
  const Config config = parse_config_text(y.str(), {}, 1, "test_train_documents");
  testing::internal::CaptureStdout();
  const int rc = train_main(config);
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("12*L*d*pairs"), std::string::npos) << "the MFU formula must say it counts visible pairs\n"
                                                         << out;
  EXPECT_NE(out.find("dropped at document boundaries"), std::string::npos) << out;

  // The batches the run saw, recomputed.
  std::unique_ptr<DataLoader> train = make_loader(config, LoaderRank{}, "train");
  std::vector<Counts> expected;
  for (int s = 0; s < steps; ++s) expected.push_back(counts_of(train->next()));
  std::unique_ptr<DataLoader> eval = make_loader(config, LoaderRank{}, "eval");
  Counts eval_expected;
  for (int b = 0; b < 2; ++b) {
    const Counts c = counts_of(eval->next());
    eval_expected.targets += c.targets, eval_expected.dropped += c.dropped;
  }
  const FlopsModel flops = flops_model(config);

  std::ifstream in(dir / "run" / "metrics.jsonl");
  std::string line;
  int step_records = 0, eval_records = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) {
      ++eval_records;
      EXPECT_EQ(j.at("eval_targets").get<double>(), eval_expected.targets);
      EXPECT_EQ(j.at("eval_boundary_targets_dropped").get<double>(), eval_expected.dropped);
      continue;
    }
    const int step = j.at("step").get<int>();
    ASSERT_GE(step, 1);
    ASSERT_LE(step, steps);
    const Counts& e = expected[size_t(step - 1)];
    ++step_records;
    ASSERT_GT(e.dropped, 0) << "the shard's samples must cross document boundaries";
    EXPECT_EQ(j.at("targets").get<double>(), e.targets) << "step " << step;
    EXPECT_EQ(j.at("boundary_targets_dropped").get<double>(), e.dropped) << "step " << step;
    EXPECT_EQ(j.at("visible_pairs_per_step").get<double>(), e.pairs) << "step " << step;
    // MFU = model FLOPs of the step / step time / peak (1 TFLOP/s, one device).
    const double seconds = j.at("ms_per_step").get<double>() / 1e3;
    const double want = flops.per_step(double(B) * T, e.pairs) / seconds / 1e12;
    EXPECT_NEAR(j.at("mfu").get<double>(), want, 1e-9 * want) << "step " << step;
    // And it is not the causal count: the documents cut the pairs well below B * T * (T+1) / 2.
    EXPECT_LT(e.pairs, 0.5 * B * T * (T + 1) / 2.0);
  }
  EXPECT_EQ(step_records, steps);
  EXPECT_EQ(eval_records, 1);
  fs::remove_all(dir);
}

// An llm.c shard of these tokens (uint16).
std::string write_shard(const fs::path& dir, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = int32_t(tokens.size());
  const std::string path = (dir / "stream_000.bin").string();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  return path;
}

// A tiny packed-documents run of `steps` steps on one CPU rank (eval at the last step when eval is set).
Config tiny_documents_run(const fs::path& dir, const std::string& shard, int eot, int steps, bool eval) {
  std::ostringstream y;
  y << "model:\n  n_layer: 1\n  d_model: 16\n  n_head: 2\n  n_kv_head: 2\n  vocab_size: 24\n  d_ff: 32\n"
    << "data:\n  source: shards\n  path: " << shard << "\n  documents: eot\n  eot_token: " << eot
    << "\n  seq_len: 32\n"
    << "train:\n  batch_size: 2\n  steps: " << steps << "\n  eval_every: " << (eval ? steps : 0)
    << "\n  eval_batches: 1\n  run_dir: " << (dir / "run").string() << "\n"
    << "checkpoint:\n  save_final: false\n"
    << "log:\n  every: 1\n"
    << "optim:\n  warmup_steps: 1\n"
    << "device: cpu\n";
  return parse_config_text(y.str(), {}, 1, "test_train_documents");
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Issue 31 row 11: every document one token long (every target crosses into the next document, so none is left).
// The steps and the eval say so, report no loss (null in metrics.jsonl, not 0), and each warns once.
TEST(TrainDocuments, NoTargetsReportsNoLossAndWarnsOnce) {
  const fs::path dir = fs::temp_directory_path() / ("rt_train_no_targets_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string shard = write_shard(dir, std::vector<uint16_t>(4000, uint16_t(kEot)));
  const int steps = 3;
  testing::internal::CaptureStdout();
  const int rc = train_main(tiny_documents_run(dir, shard, kEot, steps, /*eval=*/true));
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(occurrences(out, "warning: step 1 has no targets"), 1u) << out;
  EXPECT_EQ(occurrences(out, "has no targets"), 2u) << "one warning for the steps, one for eval\n" << out;
  EXPECT_EQ(occurrences(out, "loss n/a (no targets)"), size_t(steps) + 1) << "each step line and the eval line\n"
                                                                        << out;
  EXPECT_EQ(out.find("loss 0.0000"), std::string::npos) << out;
  std::ifstream in(dir / "run" / "metrics.jsonl");
  std::string line;
  int step_records = 0, eval_records = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) {
      ++eval_records;
      EXPECT_TRUE(j.at("eval_loss").is_null()) << line;
      EXPECT_EQ(j.at("eval_targets").get<double>(), 0) << line;
    } else {
      ++step_records;
      EXPECT_TRUE(j.at("loss").is_null()) << line;
      EXPECT_EQ(j.at("targets").get<double>(), 0) << line;
    }
  }
  EXPECT_EQ(step_records, steps);
  EXPECT_EQ(eval_records, 1);
  fs::remove_all(dir);
}

// An eot_token that occurs in none of the first samples draws a warning naming it; one that occurs does not.
TEST(TrainDocuments, WarnsWhenTheEotTokenNeverOccurs) {
  const fs::path dir = fs::temp_directory_path() / ("rt_train_no_eot_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 4000; ++i) tokens.push_back(uint16_t(i % 7 == 0 ? kEot : 1 + i % 11));  // EOT, then 1..11
  const std::string shard = write_shard(dir, tokens);
  const std::string warning = "does not occur in the first";
  for (const int eot : {23, kEot}) {  // 23: in the vocabulary, never in the data
    SCOPED_TRACE(eot);
    fs::remove_all(dir / "run");
    testing::internal::CaptureStdout();
    const int rc = train_main(tiny_documents_run(dir, shard, eot, 1, /*eval=*/false));
    const std::string out = testing::internal::GetCapturedStdout();
    ASSERT_EQ(rc, 0) << out;
    if (eot == kEot) {
      EXPECT_EQ(out.find(warning), std::string::npos) << out;
    } else {
      EXPECT_EQ(occurrences(out, "warning: data.eot_token=23 " + warning), 1u) << out;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rt
