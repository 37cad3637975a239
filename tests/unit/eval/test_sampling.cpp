// framework/eval/sampling.h and the prompt checks of framework/eval/generate.h.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "framework/eval/generate.h"
#include "framework/eval/sampling.h"
#include "kernels/tensor.h"

namespace rt {
namespace {

// (5) logits whose softmax at temperature 1 is about 0.64, 0.24, 0.09, 0.03, 0.003 for ids 2, 0, 4, 1, 3.
const std::vector<float> kLogits = {2.f, 0.9f, 3.f, -2.f, 1.f};

std::map<int32_t, int> histogram(const SamplingParams& p, int draws) {
  SampleRng rng(p.seed);
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) ++h[choose_token(kLogits.data(), 5, p, rng)];
  return h;
}

TEST(Sampling, GreedyIsArgmaxWithLowestIdOnTies) {
  SampleRng rng(1);
  EXPECT_EQ(choose_token(kLogits.data(), 5, SamplingParams{}, rng), 2);
  const std::vector<float> tie = {1.f, 4.f, 4.f};
  EXPECT_EQ(choose_token(tie.data(), 3, SamplingParams{}, rng), 1);
}

TEST(Sampling, TopKKeepsOnlyTheKMostLikely) {
  SamplingParams p;
  p.temperature = 1, p.top_k = 2, p.seed = 3;
  const auto h = histogram(p, 4000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h.at(2), h.at(0));
  EXPECT_GT(h.at(0), 700);  // 0.24 / 0.88 of 4000 = ~1090
}

TEST(Sampling, TopPKeepsTheSmallestPrefixReachingP) {
  SamplingParams p;
  p.temperature = 1, p.top_p = 0.8, p.seed = 4;  // 0.64 < 0.8 <= 0.64 + 0.24: ids 2 and 0
  const auto h = histogram(p, 4000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(2) && h.count(0));
}

TEST(Sampling, TemperatureSpreadsAndTheSeedRepeats) {
  SamplingParams p;
  p.temperature = 1, p.seed = 9;
  const auto h = histogram(p, 8000);
  EXPECT_EQ(h.size(), 5u);
  EXPECT_NEAR(h.at(2) / 8000.0, 0.64, 0.03);
  EXPECT_EQ(histogram(p, 500), histogram(p, 500));
  SamplingParams other = p;
  other.seed = 10;
  EXPECT_NE(histogram(p, 500), histogram(other, 500));
}

TEST(Sampling, BadParametersNameTheOption) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(check_sampling(p).find("--temperature"), std::string::npos);
  p = SamplingParams{};
  p.top_p = 0;
  EXPECT_NE(check_sampling(p).find("--top-p"), std::string::npos);
  p = SamplingParams{};
  p.top_k = -3;
  EXPECT_NE(check_sampling(p).find("--top-k"), std::string::npos);
  EXPECT_EQ(check_sampling(SamplingParams{}), "");
}

TEST(GenerateInputs, TokenIdsFromJsonOrSeparatedText) {
  EXPECT_EQ(parse_token_ids("[1, 2, 3]", "x"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_token_ids("4,5 6\n7", "x"), (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_TRUE(parse_token_ids("  ", "x").empty());
  EXPECT_THROW(parse_token_ids("1,a,3", "x"), Error);
  EXPECT_THROW(parse_token_ids("1,-2", "x"), Error);
}

TEST(GenerateInputs, PromptLengthAgainstTheTrainedContext) {
  RopeScalingConfig none;
  std::string warning;
  EXPECT_EQ(check_prompt_length(100, 100, none, &warning), "");
  const std::string refused = check_prompt_length(101, 100, none, &warning);
  EXPECT_NE(refused.find("trained at a context of 100"), std::string::npos) << refused;
  RopeScalingConfig llama3;
  llama3.type = "llama3", llama3.factor = 4, llama3.original_max_position_embeddings = 64;
  EXPECT_EQ(check_prompt_length(200, 100, llama3, &warning), "");
  EXPECT_NE(warning.find("covers 256"), std::string::npos) << warning;
  EXPECT_NE(check_prompt_length(257, 100, llama3, &warning), "");
}

}  // namespace
}  // namespace rt
