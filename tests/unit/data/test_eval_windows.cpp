// Eval reads the held-out split in order (issue 31): consecutive, non-overlapping windows of seq_len tokens from
// the split's start, every whole window by default (train.eval_batches: 0) or the first N x batch_size; the last
// batch is padded with windows that carry no target; a window of T tokens gives T-1 targets. Checked against the
// shard's own tokens, on one rank and split over dp x cp ranks, and the same every time.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "framework/base/data_files.h"
#include "framework/config/config.h"
#include "framework/data/data.h"
#include "framework/run/train_step.h"
#include "parallel/schedule/layout.h"
#include "tests/unit/test_shards.h"
#include "tests/unit/test_util.h"

namespace fs = std::filesystem;

namespace {

class EvalWindowsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = rt::test::make_temp_dir("rt_test_eval_windows"); }
  void TearDown() override { fs::remove_all(dir_); }

  // One llm.c shard whose token i is a function of i (so a window's tokens say where it came from).
  rt::Config config(int total, int T, int batch, int eval_batches) {
    tokens_.clear();
    for (int i = 0; i < total; ++i) tokens_.push_back(uint16_t((i * 7 + i / 13) % 251));
    const std::string path = (dir_ / "stream_000.bin").string();
    rt::test::write_llmc_shard_u16(path, tokens_);
    rt::Config c;
    c.model.vocab_size = 256;
    c.data.source = "shards";
    c.data.path = path;
    c.data.seq_len = T;
    c.train.batch_size = batch;
    c.train.eval_batches = eval_batches;
    return c;
  }
  std::vector<uint16_t> tokens_;
  fs::path dir_;
};

// Every global sample the eval reads, by global index: its tokens and targets in sequence order (ranks merged
// through the layout's positions).
struct Samples {
  std::map<uint64_t, std::vector<int32_t>> tokens, targets;
};

Samples read_eval(const rt::Config& c, int dp, int cp, const std::string& layout, rt::EvalPlan* plan_out) {
  Samples s;
  const int T = c.data.seq_len, B = c.train.batch_size, Bl = B / dp, n = T / cp;
  for (int d = 0; d < dp; ++d)
    for (int r = 0; r < cp; ++r) {
      rt::LoaderRank rank;
      rank.dp = dp, rank.dp_rank = d, rank.cp = cp, rank.cp_rank = r, rank.layout = layout;
      std::unique_ptr<rt::DataLoader> loader = rt::make_loader(c, rank, "eval");
      const rt::EvalPlan plan = rt::plan_eval(c, *loader);
      *plan_out = plan;
      const std::vector<int64_t> positions = rt::layout_positions(rt::parse_layout(layout), T, cp, r);
      loader->set_cursor(0);
      for (uint64_t b = 0; b < plan.batches; ++b) {
        const rt::Batch batch = loader->next();
        for (int i = 0; i < Bl; ++i) {
          const uint64_t index = b * uint64_t(B) + uint64_t(d * Bl + i);
          std::vector<int32_t>& tok = s.tokens[index];
          std::vector<int32_t>& tgt = s.targets[index];
          tok.resize(size_t(T), -2), tgt.resize(size_t(T), -2);
          for (int j = 0; j < n; ++j) {
            tok[size_t(positions[size_t(j)])] = batch.tokens[size_t(i * n + j)];
            tgt[size_t(positions[size_t(j)])] = batch.targets[size_t(i * n + j)];
          }
        }
      }
    }
  return s;
}

TEST_F(EvalWindowsTest, CoversEveryHeldOutTokenOnceInOrder) {
  const int total = 5000, T = 32, B = 4;
  const rt::Config c = config(total, T, B, /*eval_batches=*/0);
  const uint64_t held = uint64_t(double(total) * rt::kHeldOutFraction), begin = uint64_t(total) - held;
  const uint64_t windows = held / uint64_t(T);
  ASSERT_GT(held % uint64_t(T), 0u) << "the split should end in a partial window, which is left out";
  ASSERT_NE(windows % uint64_t(B), 0u) << "the last batch should need padding";
  for (const auto& [dp, cp, layout] : {std::tuple{1, 1, "contiguous"}, std::tuple{2, 2, "zigzag"},
                                       std::tuple{1, 4, "striped"}}) {
    SCOPED_TRACE(std::to_string(dp) + "x" + std::to_string(cp) + " " + layout);
    rt::EvalPlan plan;
    const Samples s = read_eval(c, dp, cp, layout, &plan);
    EXPECT_EQ(plan.windows, windows);
    EXPECT_EQ(plan.split_tokens, held);
    EXPECT_EQ(plan.batches, (windows + B - 1) / B);
    uint64_t targets = 0;
    for (const auto& [index, tok] : s.tokens) {
      const std::vector<int32_t>& tgt = s.targets.at(index);
      if (index >= windows) {  // padding: no target at all
        for (int32_t t : tgt) EXPECT_EQ(t, -1) << "padding window " << index;
        continue;
      }
      for (int p = 0; p < T; ++p) {
        ASSERT_EQ(tok[size_t(p)], int32_t(tokens_[size_t(begin + index * T + uint64_t(p))]))
            << "window " << index << " position " << p << ": not the split's token " << begin + index * T + p;
        const int32_t want = p + 1 < T ? tok[size_t(p + 1)] : -1;  // T tokens give T-1 targets
        EXPECT_EQ(tgt[size_t(p)], want) << "window " << index << " position " << p;
        targets += tgt[size_t(p)] >= 0;
      }
    }
    EXPECT_EQ(s.tokens.size(), plan.batches * uint64_t(B));
    EXPECT_EQ(targets, windows * uint64_t(T - 1));
    EXPECT_NE(plan.text().find("in order"), std::string::npos) << plan.text();
  }
  // The same windows every time.
  rt::EvalPlan p1, p2;
  EXPECT_EQ(read_eval(c, 1, 1, "contiguous", &p1).tokens, read_eval(c, 1, 1, "contiguous", &p2).tokens);
}

TEST_F(EvalWindowsTest, EvalBatchesTakesTheFirstWindows) {
  const int total = 5000, T = 32, B = 4;
  const uint64_t held = uint64_t(double(total) * rt::kHeldOutFraction), begin = uint64_t(total) - held;
  rt::EvalPlan plan;
  const rt::Config two = config(total, T, B, /*eval_batches=*/2);
  const Samples s = read_eval(two, 1, 1, "contiguous", &plan);
  EXPECT_EQ(plan.windows, 8u);
  EXPECT_EQ(plan.batches, 2u);
  ASSERT_EQ(s.tokens.size(), 8u);
  for (const auto& [index, tok] : s.tokens)
    for (int p = 0; p < T; ++p)
      ASSERT_EQ(tok[size_t(p)], int32_t(tokens_[size_t(begin + index * T + uint64_t(p))])) << "window " << index;
  // More batches than the split holds: capped at its windows.
  const rt::Config many = config(total, T, B, /*eval_batches=*/1000);
  read_eval(many, 1, 1, "contiguous", &plan);
  EXPECT_EQ(plan.windows, held / uint64_t(T));
}

}  // namespace
