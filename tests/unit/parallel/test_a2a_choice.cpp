// parallel/schedule/a2a_choice.h (parallel.cp_a2a: auto): the pick is the least of the printed predictions on every
// mix; what
// the model implies at cp = 8 with 16 heads (few tokens per rank, where the ring's per-step calls dominate: u > 1;
// short documents, where the ring skips its hops but the exchange still moves every head: the ring; one long
// document with 8K tokens per rank: what the H200 measured); the exposed exchange from the byte
// formula (all of it with one head group); admissibility (tp x u must divide the heads) and bad input.
#include <gtest/gtest.h>

#include <string>

#include "parallel/cp/context_attention.h"
#include "parallel/schedule/a2a_choice.h"
#include "parallel/schedule/doc_balance.h"

namespace rt {
namespace {

A2aChoice choose(const std::vector<int64_t>& lengths, int64_t T, int cp = 8, int64_t heads = 16, int64_t kv = 16,
                 int tp = 1) {
  A2aModelShape shape;
  shape.heads = heads, shape.kv_heads = kv, shape.tp = tp;
  return choose_a2a_degree({doc_starts_from_lengths(lengths, T)}, cp, shape);
}

const A2aCandidate& at(const A2aChoice& c, int u) {
  for (const A2aCandidate& x : c.candidates)
    if (x.u == u) return x;
  ADD_FAILURE() << "no candidate u=" << u;
  return c.candidates.front();
}

// The pick is the admissible candidate of least predicted fwd + bwd time, and the summary marks it.
void expect_pick_is_least(const A2aChoice& c) {
  const A2aCandidate& p = c.picked();
  EXPECT_TRUE(p.admissible);
  for (const A2aCandidate& x : c.candidates) {
    if (!x.admissible) continue;
    EXPECT_LE(p.total_us(), x.total_us()) << "u=" << x.u << " is predicted faster than the pick " << c.pick;
    EXPECT_NEAR(x.efficiency_fwd(), x.ideal_fwd_us / x.fwd_us(), 1e-12);
  }
  const std::string s = c.summary();
  EXPECT_NE(s.find("auto -> " + std::to_string(c.pick)), std::string::npos) << s;
  EXPECT_NE(s.find("u=" + std::to_string(c.pick) + " "), std::string::npos) << s;
  EXPECT_NE(s.find("<- pick"), std::string::npos) << s;
}

TEST(A2aChoice, PickIsTheLeastPredictionOnEveryMix) {
  for (int64_t T : {16384, 65536})
    for (int64_t len : {int64_t(128), int64_t(2048), int64_t(8192), T}) {
      SCOPED_TRACE("T=" + std::to_string(T) + " len=" + std::to_string(len));
      const A2aChoice c = choose({len}, T);
      ASSERT_EQ(c.candidates.size(), 4u);  // u = 1, 2, 4, 8
      expect_pick_is_least(c);
      EXPECT_EQ(at(c, 1).exchange_fwd_us + at(c, 1).exchange_bwd_us, 0.0);
      EXPECT_GT(at(c, 8).exchange_fwd_us, 0.0);
      for (const A2aCandidate& x : c.candidates)  // one ideal for all: u = 1's whole call over cp
        EXPECT_EQ(x.ideal_fwd_us, at(c, 1).ideal_fwd_us);
    }
  // A mix of lengths over several samples: the same rule on the sums.
  A2aModelShape shape;
  const std::vector<std::vector<int64_t>> samples = {doc_starts_from_lengths({300, 5000, 40, 12000}, 32768),
                                                     doc_starts_from_lengths({300, 5000, 40, 12000}, 32768, 2, 7)};
  expect_pick_is_least(choose_a2a_degree(samples, 8, shape));
}

TEST(A2aChoice, FewTokensPerRankFavourTheAllToAll) {
  // 2K tokens per rank: the ring's 8 calls per layer pay their fixed cost 8 times; the all-to-all runs one call.
  const A2aChoice whole = choose({16384}, 16384);
  EXPECT_GT(whole.pick, 1) << whole.summary();
  EXPECT_LT(at(whole, whole.pick).total_us(), at(whole, 1).total_us());
  // Documents of 8K tokens in a 16K sample: a document spans 4 ranks of the ring, and u = 4 or 8 wins.
  const A2aChoice medium = choose({8192}, 16384);
  EXPECT_GT(medium.pick, 1) << medium.summary();
  EXPECT_GT(at(medium, medium.pick).efficiency_bwd(), at(medium, 1).efficiency_bwd());
}

TEST(A2aChoice, ShortDocumentsKeepTheRing) {
  // 128-token documents: the ring skips every hop nobody needs, while the exchange still moves all heads.
  const A2aChoice shortdocs = choose({128}, 65536);
  EXPECT_EQ(shortdocs.pick, 1) << shortdocs.summary();
}

TEST(A2aChoice, OneDocumentAt8KPerRankAgreesWithTheH200) {
  // One document, 8K tokens per rank, measured on the H200 (bench/results/2026-12-01-h200-doc-cp8, -a2a-per-rank):
  // the ring (zigzag) keeps 0.83 fwd / 0.90 bwd of the ideal, and u = 8's whole call on 2 heads per rank
  // (3.2 + 9.1 ms) beats the ring's critical path (4.4 + 10.5 ms). The fitted model must say the same.
  const A2aChoice one = choose({65536}, 65536);
  EXPECT_NEAR(at(one, 1).efficiency_fwd(), 0.83, 0.05) << one.summary();
  EXPECT_NEAR(at(one, 1).efficiency_bwd(), 0.90, 0.05) << one.summary();
  EXPECT_LT(at(one, 8).total_us(), at(one, 1).total_us()) << one.summary();
  EXPECT_NE(one.pick, 1) << one.summary();
}

TEST(A2aChoice, ExchangeIsPricedFromThePlansBytes) {
  // 24 heads at u = 8: 3 KV heads per rank, odd, so one head group: both ways of the exchange are exposed whole.
  const int64_t T = 16384;
  const A2aChoice c = choose({T}, T, 8, 24, 24);
  const A2aCandidate& u8 = at(c, 8);
  ASSERT_TRUE(u8.admissible);
  EXPECT_EQ(u8.head_groups, 1);
  RingAttentionShape rs;
  rs.batch = 1, rs.local_tokens = T / 8, rs.heads = 24, rs.kv_heads = 24, rs.head_dim = 128, rs.dtype = DType::bf16;
  const HeadExchangeShape x = head_exchange_shape(rs, 8);
  const A2aLinkModel link;
  EXPECT_NEAR(u8.exchange_fwd_us, 2 * link.exchange_latency_us + x.forward_bytes / link.bytes_per_us, 1e-6);
  EXPECT_NEAR(u8.exchange_bwd_us, 2 * link.exchange_latency_us + x.backward_bytes / link.bytes_per_us, 1e-6);
  EXPECT_DOUBLE_EQ(u8.exchange_bytes, x.forward_bytes + x.backward_bytes);
  // 16 heads at u = 4: 4 KV heads, two groups: at least half of each way is exposed, never more than all of it.
  const A2aCandidate& u4 = at(choose({T}, T), 4);
  EXPECT_EQ(u4.head_groups, 2);
  rs.heads = rs.kv_heads = 16;
  const HeadExchangeShape y = head_exchange_shape(rs, 4);
  const double all = 4 * link.exchange_latency_us + y.forward_bytes / link.bytes_per_us;
  EXPECT_GE(u4.exchange_fwd_us, 0.5 * all - 1e-9);
  EXPECT_LE(u4.exchange_fwd_us, all + 1e-9);
}

TEST(A2aChoice, InadmissibleDegreesAreNamedAndSkipped) {
  // 4 heads at cp 8: u = 8 does not divide the heads.
  const A2aChoice four = choose({16384}, 16384, 8, 4, 4);
  EXPECT_FALSE(at(four, 8).admissible);
  EXPECT_NE(at(four, 8).why_not.find("tp x u = 8 does not divide n_head = 4"), std::string::npos);
  EXPECT_NE(four.pick, 8);
  EXPECT_NE(four.summary().find("u=8 not admissible"), std::string::npos) << four.summary();
  // tp 2 with 4 heads: only u = 1, 2 remain.
  const A2aChoice tp2 = choose({16384}, 16384, 8, 4, 4, 2);
  EXPECT_TRUE(at(tp2, 2).admissible);
  EXPECT_FALSE(at(tp2, 4).admissible);
  // 3 heads (MQA): no u > 1 at all, so the ring, and the reason says so.
  const A2aChoice three = choose({16384}, 16384, 8, 3, 1);
  EXPECT_EQ(three.pick, 1);
  EXPECT_NE(three.why.find("no u > 1 is admissible"), std::string::npos) << three.why;
  // GQA with fewer KV heads than a2a ranks: admissible (replicated), one head group.
  const A2aCandidate& rep = at(choose({16384}, 16384, 8, 16, 2), 8);
  EXPECT_TRUE(rep.admissible);
  EXPECT_TRUE(rep.replicated);
  EXPECT_EQ(rep.head_groups, 1);
  // cp = 1: nothing to choose.
  const A2aChoice one = choose({64}, 64, 1);
  EXPECT_EQ(one.pick, 1);
  EXPECT_EQ(one.candidates.size(), 1u);
}

TEST(A2aChoice, BadInputIsRefused) {
  A2aModelShape shape;
  EXPECT_THROW(choose_a2a_degree({}, 8, shape), Error);
  EXPECT_THROW(choose_a2a_degree({std::vector<int64_t>(100, 0)}, 8, shape), Error);  // 100 % 8 != 0
  shape.tp = 3;
  EXPECT_THROW(choose_a2a_degree({std::vector<int64_t>(64, 0)}, 8, shape), Error);  // 16 heads over tp 3
}

}  // namespace
}  // namespace rt
