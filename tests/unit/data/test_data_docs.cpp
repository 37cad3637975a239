// Packed documents in the loader (data.documents: eot): document starts, the dropped EOT-crossing target,
// positions per sample (global or per document) with more than one sample per rank, the ring-order document
// arrays for every cp rank (fixed layouts and balanced), the scheme of the ring (parallel.cp_scheme), eot_token from
// meta.json, and the refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "parallel/schedule/cp_scheme.h"
#include "tests/unit/test_util.h"

namespace fs = std::filesystem;

namespace {

constexpr int kEot = 9;

class DataDocsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = rt::test::make_temp_dir("rt_test_data_docs"); }
  void TearDown() override { fs::remove_all(dir_); }
  // One llm.c shard of `tokens` (uint16).
  std::string write_shard(const std::vector<uint16_t>& tokens) {
    const std::string path = (dir_ / "docs_000.bin").string();
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 1, header[2] = int32_t(tokens.size());
    std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
    bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // A stream of documents, each EOT then 1..11 tokens of 1..8, repeated to `total` tokens.
  rt::Config config(int T, int batch, const std::string& positions) {
    std::vector<uint16_t> tokens;
    for (int d = 0; int(tokens.size()) < 4000; ++d) {
      tokens.push_back(kEot);
      for (int t = 0; t < 1 + (d * 7) % 11; ++t) tokens.push_back(uint16_t(1 + (d + t) % 8));
    }
    rt::Config c;
    c.model.vocab_size = 16;
    c.data.source = "shards";
    c.data.path = write_shard(tokens);
    c.data.seq_len = T;
    c.data.documents = "eot";
    c.data.eot_token = kEot;
    c.data.positions = positions;
    c.train.batch_size = batch;
    return c;
  }
  fs::path dir_;
};

TEST_F(DataDocsTest, DocumentStartsTargetsAndPositionsOnOneRank) {
  const int T = 64, B = 3;
  // The held-out split (eval) goes through the same loader: it masks exactly as training does.
  for (const std::string split : {"train", "eval"})
  for (const std::string positions : {"global", "document"}) {
    SCOPED_TRACE(split + " " + positions);
    rt::Config c = config(T, B, positions);
    const rt::Batch b = rt::make_loader(c, rt::LoaderRank{}, split)->next();
    ASSERT_EQ(b.positions.size(), size_t(B * T));
    ASSERT_EQ(b.doc_pos.size(), size_t(B * T));
    int64_t dropped = 0;
    double pairs = 0;
    std::set<std::vector<int32_t>> distinct_positions;
    for (int s = 0; s < B; ++s) {
      int64_t start = 0;
      for (int p = 0; p < T; ++p) {
        const size_t k = size_t(s * T + p);
        if (p > 0 && b.tokens[k] == kEot) start = p;  // an EOT starts its document
        EXPECT_EQ(b.doc_pos[k], p);                      // cp = 1: ring order is the identity
        EXPECT_EQ(b.doc_start[k], start) << "sample " << s << " position " << p;
        EXPECT_EQ(b.positions[k], positions == "global" ? p : p - start);
        pairs += p - start + 1;  // keys [start, p] are visible to query p
        if (p + 1 < T && b.tokens[k + 1] == kEot) {
          EXPECT_EQ(b.targets[k], -1) << "the target crossing into the next document must be dropped";
          ++dropped;
        } else if (p + 1 < T) {
          EXPECT_EQ(b.targets[k], b.tokens[k + 1]);
        }
      }
      distinct_positions.insert(std::vector<int32_t>(b.positions.begin() + s * T, b.positions.begin() + (s + 1) * T));
    }
    EXPECT_GT(dropped, 0);
    EXPECT_EQ(b.boundary_targets, dropped);
    EXPECT_EQ(b.visible_pairs, pairs);
    EXPECT_LT(pairs, B * T * (T + 1) / 2.0) << "documents must cut the causal pairs";
    if (positions == "document") {
      EXPECT_GT(distinct_positions.size(), 1u) << "positions must differ per sample";
    }
  }
}

// Every cp rank of every layout (balanced included) sees the same whole-sample document arrays, holds exactly
// the tokens at its columns of the ring order, and the ranks together hold every position once.
TEST_F(DataDocsTest, RingOrderArraysAgreeAcrossRanks) {
  const int T = 96, B = 2, cp = 4;
  rt::Config c = config(T, B, "document");
  const rt::Batch whole = rt::make_loader(c, rt::LoaderRank{}, "train")->next();
  for (const std::string layout : {"contiguous", "zigzag", "striped", "balanced"}) {
    SCOPED_TRACE(layout);
    std::vector<rt::Batch> ranks;
    for (int r = 0; r < cp; ++r) {
      rt::LoaderRank rank;
      rank.cp = cp, rank.cp_rank = r, rank.layout = layout;
      ranks.push_back(rt::make_loader(c, rank, "train")->next());
    }
    for (int r = 0; r < cp; ++r) {
      EXPECT_EQ(ranks[size_t(r)].doc_pos, ranks[0].doc_pos);
      EXPECT_EQ(ranks[size_t(r)].doc_start, ranks[0].doc_start);
    }
    const int n = T / cp;
    for (int s = 0; s < B; ++s) {
      std::vector<int> seen(size_t(T), 0);
      for (int r = 0; r < cp; ++r)
        for (int j = 0; j < n; ++j) {
          const int64_t p = ranks[0].doc_pos[size_t(s * T + r * n + j)];
          ++seen[size_t(p)];
          const size_t local = size_t(s * n + j), g = size_t(s * T + p);
          EXPECT_EQ(ranks[size_t(r)].tokens[local], whole.tokens[g]);
          EXPECT_EQ(ranks[size_t(r)].targets[local], whole.targets[g]);
          EXPECT_EQ(ranks[size_t(r)].positions[local], whole.positions[g]);
          EXPECT_EQ(ranks[0].doc_start[size_t(s * T + r * n + j)], whole.doc_start[g]);
        }
      for (int p = 0; p < T; ++p) EXPECT_EQ(seen[size_t(p)], 1) << "position " << p;
    }
    // Each rank counts the dropped boundary targets and the visible pairs of its own query rows: over the
    // ranks they add up to the whole sample's (what the trainer's counts and MFU sum over dp x cp).
    int64_t dropped = 0;
    double pairs = 0;
    for (const rt::Batch& rb : ranks) dropped += rb.boundary_targets, pairs += rb.visible_pairs;
    EXPECT_GT(whole.boundary_targets, 0);
    EXPECT_EQ(dropped, whole.boundary_targets);
    EXPECT_EQ(pairs, whole.visible_pairs);
  }
}

// parallel.cp_scheme: ring and gather as asked on a ring of more than one rank, the ring on one rank and without
// documents; auto takes the scheme of least predicted time summed over the batch's samples, recomputed here from the
// batch's own arrays (parallel/schedule/cp_scheme.h), the same on every rank.
TEST_F(DataDocsTest, CpSchemeAsAskedAndAutoByPrediction) {
  const int T = 96, B = 3, cp = 4;
  for (const std::string layout : {"contiguous", "balanced"})
    for (const std::string scheme : {"ring", "gather", "auto"}) {
      SCOPED_TRACE(layout + " " + scheme);
      rt::Config c = config(T, B, "document");
      c.parallel.cp_scheme = scheme == "ring" ? rt::CpSchemeSetting::ring
                             : scheme == "gather" ? rt::CpSchemeSetting::gather : rt::CpSchemeSetting::automatic;
      std::vector<rt::Batch> ranks;
      for (int r = 0; r < cp; ++r) {
        rt::LoaderRank rank;
        rank.cp = cp, rank.cp_rank = r, rank.layout = layout;
        ranks.push_back(rt::make_loader(c, rank, "train")->next());
        EXPECT_EQ(ranks.back().cp_scheme, ranks[0].cp_scheme) << "rank " << r << " picked otherwise";
      }
      const rt::Batch& b = ranks[0];
      if (scheme != "auto") {
        EXPECT_EQ(b.cp_scheme, scheme == "gather" ? rt::CpScheme::gather : rt::CpScheme::ring);
        EXPECT_EQ(b.cp_ring_us, 0);
        continue;
      }
      std::vector<rt::CpSchemePrediction> samples;
      double ring_us = 0, gather_us = 0;
      for (int s = 0; s < B; ++s) {
        std::vector<int64_t> order(b.doc_pos.begin() + s * T, b.doc_pos.begin() + (s + 1) * T);  // (T)
        std::vector<int64_t> start(static_cast<size_t>(T));                                     // (T) by position
        for (int col = 0; col < T; ++col) start[size_t(order[size_t(col)])] = b.doc_start[size_t(s * T + col)];
        samples.push_back(rt::predict_cp_schemes(start, order, cp, rt::cp_scheme_ring_shape(c, cp)));
        ring_us += samples.back().ring.total_us(), gather_us += samples.back().gather.total_us();
      }
      EXPECT_GT(ring_us, 0);
      EXPECT_GT(gather_us, 0);
      EXPECT_DOUBLE_EQ(b.cp_ring_us, ring_us);
      EXPECT_DOUBLE_EQ(b.cp_gather_us, gather_us);
      EXPECT_EQ(b.cp_scheme, rt::pick_cp_scheme(samples));
      EXPECT_EQ(b.cp_scheme, gather_us < ring_us ? rt::CpScheme::gather : rt::CpScheme::ring);
    }
  rt::Config c = config(T, B, "document");
  c.parallel.cp_scheme = rt::CpSchemeSetting::gather;
  EXPECT_EQ(rt::make_loader(c, rt::LoaderRank{}, "train")->next().cp_scheme, rt::CpScheme::ring) << "one rank";
}

TEST_F(DataDocsTest, EotTokenDefaultsFromMetaJson) {
  rt::Config c = config(32, 1, "global");
  c.data.eot_token = -1;
  EXPECT_EQ(rt::resolved_eot_token(c), 50256);  // no meta.json: GPT-2's
  std::ofstream(dir_ / "meta.json") << R"({"tokenizer": "x", "eot_token": 7})";
  EXPECT_EQ(rt::resolved_eot_token(c), 7);
}

// Issue 31 row 9: a negative eot_token other than -1 (auto) was taken for "the default", and a later error then
// blamed data.eot_token=50256. It is refused up front, naming the key, the value and the fix.
TEST_F(DataDocsTest, RefusesANegativeEotTokenNamingKeyValueAndFix) {
  for (const std::string documents : {"eot", "none"}) {
    SCOPED_TRACE(documents);
    rt::Config c = config(32, 1, "global");
    c.data.documents = documents;
    c.data.eot_token = -7;
    const std::string error = rt::test::error_of([&] { rt::validate_config(c, 0); });
    EXPECT_NE(error.find("data.eot_token=-7 is negative"), std::string::npos) << error;
    EXPECT_NE(error.find("leave it out (or -1)"), std::string::npos) << error;
    EXPECT_EQ(error.find("data.eot_token=50256"), std::string::npos) << error;
  }
  rt::Config c = config(32, 1, "global");
  c.data.eot_token = -7;
  EXPECT_NE(rt::test::error_of([&] { rt::resolved_eot_token(c); }).find("data.eot_token=-7"), std::string::npos);
  c.data.eot_token = -1;  // auto stays valid: no meta.json, so GPT-2's
  EXPECT_EQ(rt::resolved_eot_token(c), 50256);
}

TEST_F(DataDocsTest, RefusesBadDocumentConfigsWithTheFix) {
  rt::Config c = config(32, 1, "global");
  c.data.eot_token = 50256;  // >= vocab 16
  EXPECT_NE(rt::test::error_of([&] { rt::validate_config(c, 0); }).find("data.eot_token=50256 is >= model.vocab_size"),
            std::string::npos);
  rt::Config copy;
  copy.data.source = "copy";
  copy.data.documents = "eot";
  EXPECT_NE(rt::test::error_of([&] { rt::validate_config(copy, 0); }).find("the copy task has no documents"),
            std::string::npos);
  rt::Config pos = config(32, 1, "document");
  pos.data.documents = "none";
  EXPECT_NE(rt::test::error_of([&] { rt::validate_config(pos, 0); }).find("set data.documents: eot"),
            std::string::npos);
  rt::Config bal = config(32, 1, "global");
  bal.data.documents = "none";
  bal.parallel.layout = "balanced";
  EXPECT_NE(rt::test::error_of([&] { rt::validate_config(bal, 0); }).find("layout=balanced"), std::string::npos);
  rt::Config scheme = config(32, 1, "document");
  // The scheme is read into an enum with the config: a misspelling is refused there, with the choice's message.
  const std::string misspelt =
      rt::test::error_of([&] { rt::parse_config_text("parallel:\n  cp_scheme: allgather\n", {}, 0); });
  EXPECT_NE(misspelt.find("parallel.cp_scheme='allgather' is not a valid choice; use one of: ring, gather, auto"),
            std::string::npos) << misspelt;
  const std::string set =
      rt::test::error_of([&] { rt::parse_config_text("model:\n  n_layer: 2\n", {"parallel.cp_scheme=Ring"}, 0); });
  EXPECT_NE(set.find("parallel.cp_scheme='Ring' is not a valid choice"), std::string::npos) << set;
  scheme.parallel.cp_scheme = rt::CpSchemeSetting::gather;
  scheme.data.documents = "none";
  scheme.data.positions = "global";
  const std::string no_docs = rt::test::error_of([&] { rt::validate_config(scheme, 0); });
  EXPECT_NE(no_docs.find("parallel.cp_scheme=gather"), std::string::npos) << no_docs;
  EXPECT_NE(no_docs.find("set data.documents: eot, or use cp_scheme: ring"), std::string::npos) << no_docs;
  scheme.parallel.cp_scheme = rt::CpSchemeSetting::automatic;  // auto without documents: the ring, no error
  EXPECT_EQ(rt::test::error_of([&] { rt::validate_config(scheme, 0); }).find("cp_scheme"), std::string::npos);
  rt::Config ok = config(32, 1, "document");
  ok.parallel.cp = 2;
  EXPECT_EQ(rt::resolved_layout(ok), "balanced");  // auto picks balanced with documents
}

}  // namespace
