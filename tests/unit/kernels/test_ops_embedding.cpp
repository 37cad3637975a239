// CPU embedding: forward gathers rows exactly; backward accumulates (repeated tokens sum) against fp64.
#include <gtest/gtest.h>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

TEST(EmbeddingCpu, ForwardGathersAndBackwardAccumulates) {
  const int64_t V = 11, C = 9, N = 20;
  HostTensor table = test::random_f32({V, C}, 1), tokens = test::i32({N});
  std::mt19937 gen(2);
  for (int64_t n = 0; n < N; ++n) tokens.i()[n] = int32_t(gen() % V);
  tokens.i()[3] = tokens.i()[7] = tokens.i()[12] = 4;  // repeats must sum
  HostTensor out = test::f32({N, C});
  test::poison(out);
  embedding_fwd(out, tokens, table);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[n * C + c], table[tokens.i()[n] * C + c]) << n << "," << c;

  HostTensor dout = test::random_f32({N, C}, 3), dtable = test::random_f32({V, C}, 4);
  std::vector<double> ref = dtable.to_double();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) ref[size_t(tokens.i()[n] * C + c)] += dout[n * C + c];
  embedding_bwd(dtable, dout, tokens);
  EXPECT_LT(test::rel_err(dtable, ref), 1e-6);
}

TEST(EmbeddingCpu, RefusesTokensOutsideTheVocabulary) {
  HostTensor table = test::random_f32({5, 3}, 1), tokens = test::i32({2}), out = test::f32({2, 3});
  tokens.i()[0] = 1;
  tokens.i()[1] = 5;
  EXPECT_THROW(embedding_fwd(out, tokens, table), Error);
  tokens.i()[1] = -1;
  EXPECT_THROW(embedding_bwd(table, out, tokens), Error);
}

}  // namespace
}  // namespace rt
