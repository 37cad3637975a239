// Data: the copy task's halves and determinism, the dp split, the layout permutation of tokens, targets
// and positions, byte files with a held-out tail, and llm.c shards (concatenation and every header error).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/run/train_step.h"
#include "kernels/tensor.h"
#include "parallel/schedule/layout.h"
#include "tests/unit/test_util.h"

namespace fs = std::filesystem;

namespace {

using rt::test::error_of;

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = rt::test::make_temp_dir("rt_test_data");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An llm.c shard; the fields can be spoiled to test each check.
  std::string write_shard(const std::string& name, const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                          int32_t version = 1, int64_t declared = -1, size_t drop_bytes = 0) {
    const std::string path = (dir_ / name).string();
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = int32_t(declared >= 0 ? declared : int64_t(tokens.size()));
    std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
    bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    bytes.resize(bytes.size() - drop_bytes);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // llm.c's Llama 3 format: magic 20240801, version 7, uint32 tokens.
  std::string write_shard32(const std::string& name, const std::vector<uint32_t>& tokens, int32_t magic = 20240801,
                            int32_t version = 7) {
    const std::string path = (dir_ / name).string();
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = int32_t(tokens.size());
    std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
    bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  static rt::Config copy_config(int seq_len, int batch, int vocab = 17) {
    rt::Config c;
    c.model.vocab_size = vocab;
    c.data.source = "copy";
    c.data.seq_len = seq_len;
    c.data.seed = 777;
    c.train.batch_size = batch;
    return c;
  }

  fs::path dir_;
};

// One whole global batch (dp=1, cp=1): (B, T) tokens, targets and loss groups.
rt::Batch whole_batch(const rt::Config& c, uint64_t cursor, const std::string& split = "train") {
  auto loader = rt::make_loader(c, rt::LoaderRank{}, split);
  loader->set_cursor(cursor);
  rt::Batch b = loader->next();
  EXPECT_EQ(loader->cursor(), cursor + 1);
  return b;
}

TEST_F(DataTest, CopyTaskHalves) {
  const int T = 64, vocab = 17, B = 3;
  for (int span_setting : {0, 20}) {
    rt::Config c = copy_config(T, B, vocab);
    c.data.copy_span = span_setting;
    const int S = span_setting ? span_setting : (T - 1) / 2;
    const rt::Batch b = whole_batch(c, 5);
    ASSERT_EQ(b.batch, B);
    ASSERT_EQ(b.tokens_per_rank, T);
    // The copy source reports its two halves as loss groups 1 and 2.
    ASSERT_EQ(b.group_names, (std::vector<std::string>{"first_half", "repeat_half"}));
    for (int s = 0; s < B; ++s) {
      const int32_t* tok = &b.tokens[size_t(s * T)];
      const int32_t* tgt = &b.targets[size_t(s * T)];
      const uint8_t* group = &b.groups[size_t(s * T)];
      int distinct = 0;
      for (int i = 0; i < S; ++i) {
        EXPECT_GE(tok[i], 0);
        EXPECT_LT(tok[i], vocab - 1) << "span tokens must avoid the separator";
        EXPECT_EQ(tok[S + 1 + i], tok[i]) << "repeat differs at " << i;
        distinct += i > 0 && tok[i] != tok[i - 1];
      }
      EXPECT_GT(distinct, S / 2) << "span looks constant";
      EXPECT_EQ(tok[S], vocab - 1) << "separator";
      int first = 0, repeat = 0;
      for (int p = 0; p < T; ++p) {
        if (group[p] == 1) {
          ++first;
          EXPECT_LT(p, S - 1);
          EXPECT_EQ(tgt[p], tok[p + 1]);
        } else if (group[p] == 2) {
          ++repeat;
          EXPECT_EQ(tgt[p], tok[p - S]) << "repeat target must be the token S positions back, p=" << p;
          EXPECT_EQ(tgt[p], tok[p + 1]);
        } else {
          EXPECT_EQ(group[p], 0) << p;
          EXPECT_TRUE(tgt[p] == -1 || tgt[p] == tok[p + 1]) << p;
        }
      }
      EXPECT_EQ(first, S - 1);
      EXPECT_EQ(repeat, S);
      EXPECT_EQ(tgt[T - 1], -1);
    }
  }
}

TEST_F(DataTest, CopyTaskDeterministicInSeedCursorAndIndex) {
  const rt::Config c = copy_config(48, 4);
  const rt::Batch a = whole_batch(c, 3), b = whole_batch(c, 3);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.targets, b.targets);
  // Sequential next() calls equal set_cursor jumps (resume).
  auto loader = rt::make_loader(c, rt::LoaderRank{}, "train");
  for (int i = 0; i < 3; ++i) loader->next();
  EXPECT_EQ(loader->next().tokens, a.tokens);
  EXPECT_NE(whole_batch(c, 4).tokens, a.tokens) << "different cursors must give different batches";
  EXPECT_NE(whole_batch(c, 3, "eval").tokens, a.tokens) << "eval must be a disjoint stream";
  rt::Config other = c;
  other.data.seed = 778;
  EXPECT_NE(whole_batch(other, 3).tokens, a.tokens) << "the seed must matter";
  // Samples inside one batch differ.
  EXPECT_FALSE(std::equal(a.tokens.begin(), a.tokens.begin() + 48, a.tokens.begin() + 48));
}

TEST_F(DataTest, DataParallelRanksSplitTheGlobalBatch) {
  const int T = 32, B = 6, dp = 3;
  const rt::Config c = copy_config(T, B);
  const rt::Batch global = whole_batch(c, 2);
  for (int r = 0; r < dp; ++r) {
    rt::LoaderRank rank;
    rank.dp = dp;
    rank.dp_rank = r;
    auto loader = rt::make_loader(c, rank, "train");
    loader->set_cursor(2);
    const rt::Batch b = loader->next();
    ASSERT_EQ(b.batch, B / dp);
    const auto begin = global.tokens.begin() + r * (B / dp) * T;
    EXPECT_TRUE(std::equal(b.tokens.begin(), b.tokens.end(), begin)) << "dp rank " << r;
  }
}

TEST_F(DataTest, LayoutPermutesTokensTargetsAndPositions) {
  const int T = 48, B = 2, cp = 4;
  const rt::Config c = copy_config(T, B);
  const rt::Batch global = whole_batch(c, 1);
  for (const char* layout : {"contiguous", "zigzag", "striped"}) {
    std::vector<int> seen(T, 0);
    std::vector<int32_t> rebuilt(size_t(B * T), -7);  // (B, T) tokens reassembled from the ranks
    for (int r = 0; r < cp; ++r) {
      rt::LoaderRank rank;
      rank.cp = cp;
      rank.cp_rank = r;
      rank.layout = layout;
      auto loader = rt::make_loader(c, rank, "train");
      loader->set_cursor(1);
      const rt::Batch b = loader->next();
      const int n = T / cp;
      ASSERT_EQ(b.tokens_per_rank, n);
      ASSERT_EQ(b.positions.size(), size_t(B * n));  // (B, n): every sample alike without documents
      const std::vector<int64_t> want = rt::layout_positions(rt::parse_layout(layout), T, cp, r);
      for (int j = 0; j < n; ++j) {
        const int p = b.positions[size_t(j)];
        EXPECT_EQ(p, want[size_t(j)]) << layout << " rank " << r;
        for (int s = 1; s < B; ++s) EXPECT_EQ(b.positions[size_t(s * n + j)], p);
        ++seen[size_t(p)];
        for (int s = 0; s < B; ++s) {
          const size_t local = size_t(s * n + j), g = size_t(s * T + p);
          EXPECT_EQ(b.tokens[local], global.tokens[g]);
          EXPECT_EQ(b.targets[local], global.targets[g]) << layout << " position " << p;
          EXPECT_EQ(b.groups[local], global.groups[g]);
          // The target of global position p is the token at p+1 (or -1 at the end / ignored).
          EXPECT_TRUE(b.targets[local] == -1 || b.targets[local] == global.tokens[g + 1]);
          rebuilt[g] = b.tokens[local];
        }
      }
    }
    for (int p = 0; p < T; ++p) EXPECT_EQ(seen[size_t(p)], 1) << layout << ": position " << p;
    EXPECT_EQ(rebuilt, global.tokens) << layout;
  }
  // zigzag with cp=4 holds chunks r and 7-r of 8: spot-check rank 1.
  rt::LoaderRank rank;
  rank.cp = cp;
  rank.cp_rank = 1;
  rank.layout = "zigzag";
  const rt::Batch z = rt::make_loader(c, rank, "train")->next();
  EXPECT_EQ(z.positions.front(), 6);
  EXPECT_EQ(z.positions.back(), 41);  // chunk 6 = positions 36..41
}

TEST_F(DataTest, BytesHeldOutTailAndEvalPath) {
  // First 90%: lowercase letters; last 10%: uppercase. Windows must stay inside their split.
  const int n = 20000, T = 64;
  std::mt19937 rng(11);
  std::string text(n, 'x');
  for (int i = 0; i < n; ++i) text[size_t(i)] = char((i < n * 9 / 10 ? 'a' : 'A') + rng() % 26);
  const std::string path = (dir_ / "text.txt").string();
  std::ofstream(path, std::ios::binary) << text;
  rt::Config c;
  c.model.vocab_size = 256;
  c.data.source = "bytes";
  c.data.path = path;
  c.data.seq_len = T;
  c.train.batch_size = 8;
  for (const char* split : {"train", "eval"}) {
    auto loader = rt::make_loader(c, rt::LoaderRank{}, split);
    for (int k = 0; k < 5; ++k) {
      const rt::Batch b = loader->next();
      for (int s = 0; s < b.batch; ++s) {
        const int32_t* tok = &b.tokens[size_t(s * T)];
        const std::string window(tok, tok + T);
        EXPECT_NE(text.find(window), std::string::npos) << "window is not a substring of the file";
        for (int i = 0; i < T; ++i) {
          const bool lower = tok[i] >= 'a' && tok[i] <= 'z';
          EXPECT_EQ(lower, std::string(split) == "train") << split << " window crosses into the other split";
        }
        for (int i = 0; i + 1 < T; ++i) EXPECT_EQ(b.targets[size_t(s * T + i)], tok[i + 1]);
        EXPECT_EQ(b.targets[size_t(s * T + T - 1)], -1);
      }
    }
  }
  // With eval_path, eval reads that file and train the whole main file.
  const std::string eval_path = (dir_ / "eval.txt").string();
  std::ofstream(eval_path, std::ios::binary) << std::string(500, '#');
  c.data.eval_path = eval_path;
  const rt::Batch e = rt::make_loader(c, rt::LoaderRank{}, "eval")->next();
  for (int32_t t : e.tokens) EXPECT_EQ(t, '#');
}

TEST_F(DataTest, ShardsConcatenateInNameOrder) {
  // Tokens count up across two shards, so every window is a run of consecutive values.
  const int vocab = 50000, T = 40;
  std::vector<uint16_t> a(1000), b(700);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint16_t(1000 + i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint16_t(2000 + i);
  write_shard("tok_000.bin", a);
  write_shard("tok_001.bin", b);
  rt::Config c;
  c.model.vocab_size = vocab;
  c.data.source = "shards";
  c.data.path = (dir_ / "tok_*.bin").string();
  c.data.seq_len = T;
  c.train.batch_size = 16;
  auto loader = rt::make_loader(c, rt::LoaderRank{}, "train");
  const uint16_t held_first = uint16_t(2000 + 700 - 170);  // the last 10% of 1700 tokens are held out
  for (int k = 0; k < 8; ++k) {
    const rt::Batch batch = loader->next();
    for (int s = 0; s < batch.batch; ++s)
      for (int i = 1; i < T; ++i) {
        const int32_t prev = batch.tokens[size_t(s * T + i - 1)], cur = batch.tokens[size_t(s * T + i)];
        EXPECT_TRUE(cur == prev + 1 || (prev == 1999 && cur == 2000)) << prev << " -> " << cur;
        EXPECT_LT(cur, held_first) << "a training window reached the held-out tail";
      }
  }
  const rt::Batch ev = rt::make_loader(c, rt::LoaderRank{}, "eval")->next();
  for (int32_t t : ev.tokens) EXPECT_GE(t, held_first);
}

TEST_F(DataTest, ShardHeaderErrorsNameFileAndField) {
  std::vector<uint16_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 200);
  rt::Config c;
  c.model.vocab_size = 256;
  c.data.source = "shards";
  c.data.seq_len = 16;
  c.train.batch_size = 2;
  auto load = [&](const std::string& path) {
    c.data.path = path;
    return error_of([&] { rt::make_loader(c, rt::LoaderRank{}, "train"); });
  };
  const std::string magic = write_shard("magic.bin", tokens, 12345);
  std::string e = load(magic);
  EXPECT_NE(e.find("magic.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("'magic' is 12345; llm.c shards are (magic 20240520, version 1, uint16 tokens) or (magic 20240801, "
                   "version 7, uint32 tokens)"), std::string::npos) << e;

  e = load(write_shard("version.bin", tokens, 20240520, 2));
  EXPECT_NE(e.find("version.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("'version' is 2 with magic 20240520, expected 1"), std::string::npos) << e;
  e = load(write_shard32("version32.bin", {1, 2, 3}, 20240801, 1));
  EXPECT_NE(e.find("'version' is 1 with magic 20240801, expected 7"), std::string::npos) << e;
  e = load(write_shard32("mixed.bin", {1, 2, 3}, 20240520, 7));  // uint16 magic with the uint32 version
  EXPECT_NE(e.find("'version' is 7 with magic 20240520, expected 1"), std::string::npos) << e;

  e = load(write_shard("truncated.bin", tokens, 20240520, 1, -1, 10));
  EXPECT_NE(e.find("truncated.bin' is truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("'token count' says 300 tokens"), std::string::npos) << e;

  e = load(write_shard("short.bin", {}, 20240520, 1, 0, 1000));
  EXPECT_NE(e.find("short.bin' is truncated"), std::string::npos) << e;

  std::vector<uint16_t> bad = tokens;
  bad[123] = 300;
  e = load(write_shard("vocab.bin", bad));
  EXPECT_NE(e.find("vocab.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("token 300 at token index 123 is >= model.vocab_size=256"), std::string::npos) << e;

  e = load((dir_ / "none_*.bin").string());
  EXPECT_NE(e.find("matches no file"), std::string::npos) << e;

  // The good shard loads, and config validation checks the headers before any work.
  EXPECT_EQ(load(write_shard("good.bin", tokens)), "<no error>");
  c.data.path = magic;
  e = error_of([&] { rt::validate_config(c, 0); });
  EXPECT_NE(e.find("data.path"), std::string::npos) << e;
  EXPECT_NE(e.find("'magic' is 12345"), std::string::npos) << e;
}

// uint32 shards (Llama 3 vocabularies): tokens above 65535 come through exactly, in the same stream as a
// uint16 shard, and a token >= vocab_size is refused.
TEST_F(DataTest, Uint32ShardsCarryTokensAbove65535) {
  const int64_t n = 1000, T = 20;
  std::vector<uint16_t> a(static_cast<size_t>(n));
  std::vector<uint32_t> b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) a[size_t(i)] = uint16_t(i), b[size_t(i)] = uint32_t(100000 + i);
  write_shard("mix_000.bin", a);
  write_shard32("mix_001.bin", b);
  rt::Config c;
  c.model.vocab_size = 128256;
  c.data.source = "shards";
  c.data.path = (dir_ / "mix_*.bin").string();
  c.data.eval_path = (dir_ / "mix_001.bin").string();
  c.data.seq_len = T;
  c.train.batch_size = 4;
  EXPECT_EQ(error_of([&] { rt::validate_config(c, 0); }), "<no error>");
  auto loader = rt::make_loader(c, rt::LoaderRank{}, "eval");
  const rt::Batch batch = loader->next();
  for (int64_t s = 0; s < batch.batch; ++s) {
    const int32_t first = batch.tokens[size_t(s * T)];
    ASSERT_GE(first, 100000);
    for (int64_t t = 0; t < T; ++t) EXPECT_EQ(batch.tokens[size_t(s * T + t)], first + t);
  }
  c.model.vocab_size = 100500;
  const std::string e = error_of([&] { rt::make_loader(c, rt::LoaderRank{}, "eval"); });
  EXPECT_NE(e.find("token 100500 at token index 500 is >= model.vocab_size=100500"), std::string::npos) << e;
}

TEST_F(DataTest, LoaderRankChecks) {
  const rt::Config c = copy_config(32, 4);
  rt::LoaderRank r;
  r.dp = 2;
  r.dp_rank = 2;
  EXPECT_NE(error_of([&] { rt::make_loader(c, r, "train"); }).find("dp_rank 2 is outside"), std::string::npos);
  r = rt::LoaderRank{};
  r.dp = 3;
  EXPECT_NE(error_of([&] { rt::make_loader(c, r, "train"); }).find("not divisible by dp=3"), std::string::npos);
  EXPECT_NE(error_of([&] { rt::make_loader(c, rt::LoaderRank{}, "test"); }).find("split 'test'"), std::string::npos);
}

}  // namespace

// The trainer's per-group losses come from the batch's loss groups, named by the data source.
TEST(LossTallyTest, ReportsTheSourcesLossGroups) {
  rt::Batch b;
  b.targets = {1, 2, 3, -1, 5};
  b.groups = {1, 2, 0, 1, 1};  // the ignored target (-1) counts nowhere
  b.group_names = {"first_half", "repeat_half"};
  rt::LossTally t;
  t.add(b, {1.f, 2.f, 3.f, 100.f, 5.f});
  EXPECT_DOUBLE_EQ(t.mean(0), (1 + 2 + 3 + 5) / 4.0);
  const auto groups = t.group_means();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].first, "first_half");
  EXPECT_DOUBLE_EQ(groups[0].second, 3.0);
  EXPECT_EQ(groups[1].first, "repeat_half");
  EXPECT_DOUBLE_EQ(groups[1].second, 2.0);
  rt::Batch plain;  // a source without groups (bytes, shards)
  plain.targets = {1, 2};
  plain.groups = {0, 0};
  rt::LossTally p;
  p.add(plain, {1.f, 3.f});
  EXPECT_DOUBLE_EQ(p.mean(0), 2.0);
  EXPECT_TRUE(p.group_means().empty());
}
