// check_generate_counts (framework/plan/generate_limits.h), the one range check generate and plan share: every
// count out of range is refused naming its option, before any sum (the counts near 2^63 that used to wrap the
// cache capacity), and the largest counts accepted are exactly at the limit.
#include <gtest/gtest.h>

#include <climits>

#include "framework/plan/generate_limits.h"

namespace rt {
namespace {

std::string check(int64_t prompt, int64_t new_tokens, int64_t chunk = 0, const std::string& from = "--prompt") {
  return check_generate_counts({prompt, new_tokens, chunk, from});
}

TEST(GenerateLimits, AcceptsCountsUpToTheLimit) {
  EXPECT_EQ(check(1, 0), "");
  EXPECT_EQ(check(3, 64, 16), "");
  EXPECT_EQ(check(3, kMaxGenerateTokens - 3), "");
  EXPECT_EQ(check(kMaxGenerateTokens, 0, kMaxGenerateTokens), "");
}

TEST(GenerateLimits, RefusesEachCountOutOfRangeNamingItsOption) {
  struct Case {
    int64_t prompt, new_tokens, chunk;
    const char* names;
  };
  const Case cases[] = {
      {3, int64_t(1) << 62, 0, "--max-new-tokens 4611686018427387904"},
      {3, INT64_MAX, 0, "--max-new-tokens"},
      {3, -1, 0, "--max-new-tokens -1"},
      {3, INT64_MIN, 0, "--max-new-tokens"},
      {3, kMaxGenerateTokens - 2, 0, "at most 1073741821"},  // the sum, not either count alone
      {0, 5, 0, "--prompt (0 tokens)"},
      {kMaxGenerateTokens + 1, 0, 0, "--prompt"},
      {INT64_MAX, INT64_MAX, 0, "--prompt"},
      {3, 5, -1, "--prefill-chunk -1"},
      {3, 5, INT64_MAX, "--prefill-chunk"},
  };
  for (const Case& c : cases) {
    const std::string got = check(c.prompt, c.new_tokens, c.chunk);
    EXPECT_NE(got.find(c.names), std::string::npos) << c.prompt << " + " << c.new_tokens << ", chunk " << c.chunk
                                                    << ": " << got;
  }
}

TEST(GenerateLimits, PlanNamesItsOwnOptionWithTheCount) {
  EXPECT_NE(check(0, 64, 0, "--generate-context").find("--generate-context 0"), std::string::npos);
  EXPECT_NE(check(INT64_MAX, 64, 0, "--generate-context").find("--generate-context 9223372036854775807"),
            std::string::npos);
}

}  // namespace
}  // namespace rt
