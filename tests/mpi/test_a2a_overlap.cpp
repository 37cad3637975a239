// The pipelined all-to-all head exchange (parallel/cp/context_attention.h, head groups) against the blocking one
// (head_groups = 1), on CPU ranks under `mpirun -np 4`:
//   - forward O and backward dQ, dK, dV equal bit for bit on cp 4 with u 4 and u 2 (a ring of 2), MHA and GQA, the
//     default depth and a forced deeper one; GQA with replicated K/V keeps one group (the default picks it);
//   - the exposed all-to-all time is reported: a late rank of the a2a group shows up in exposed_a2a_s, not in
//     compute_s.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <thread>
#include <vector>

#include "parallel/comm/process_grid.h"
#include "parallel/cp/context_attention.h"
#include "tests/mpi/mpi_world.h"

using namespace rt;
using rt::test::sub_world;
using rt::test::world_rank;
using rt::test::world_size;

namespace {

struct OverlapCase {
  const char* name;
  int u;
  int64_t heads, kv_heads;
  int groups;           // the pipelined side: 0 = the default
  int expected_groups;  // what it must come out as
};

struct Buffers {
  std::vector<float> q, k, v, dout;     // (B, n, H, D), (B, n, Hkv, D) x2, (B, n, H, D): inputs
  std::vector<float> out, lse, dq, dk, dv;  // outputs, NaN-filled
};

Buffers make_buffers(const RingAttentionShape& s, uint32_t seed) {
  const int64_t qn = s.batch * s.local_tokens * s.heads * s.head_dim;
  const int64_t kvn = s.batch * s.local_tokens * s.kv_heads * s.head_dim;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Buffers b;
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(size_t(n));
    for (float& e : x) e = normal(rng);
  };
  fill(b.q, qn), fill(b.k, kvn), fill(b.v, kvn), fill(b.dout, qn);
  b.out.assign(size_t(qn), std::nanf("")), b.dq.assign(size_t(qn), std::nanf(""));
  b.dk.assign(size_t(kvn), std::nanf("")), b.dv.assign(size_t(kvn), std::nanf(""));
  b.lse.assign(size_t(s.batch * s.heads * s.local_tokens), std::nanf(""));
  return b;
}

Tensor t4(std::vector<float>& x, const RingAttentionShape& s, int64_t heads) {
  return Tensor(x.data(), DType::f32, Device::cpu(), {s.batch, s.local_tokens, heads, s.head_dim});
}

// One forward and backward through `attn` on copies of `in`.
Buffers run(ContextAttention& attn, const RingAttentionShape& s, const Buffers& in) {
  Buffers b = in;
  const int64_t H = s.heads, Hkv = s.kv_heads;
  Tensor lse(b.lse.data(), DType::f32, Device::cpu(), {int64_t(b.lse.size())});
  attn.forward(t4(b.q, s, H), t4(b.k, s, Hkv), t4(b.v, s, Hkv), t4(b.out, s, H), lse);
  attn.backward(t4(b.q, s, H), t4(b.k, s, Hkv), t4(b.v, s, Hkv), t4(b.out, s, H), t4(b.dout, s, H), lse,
                t4(b.dq, s, H), t4(b.dk, s, Hkv), t4(b.dv, s, Hkv));
  return b;
}

// Elements that differ in their bits (NaN included), and whether any value is not finite.
size_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  size_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return diff;
}

bool all_finite(const std::vector<float>& a) {
  for (float x : a)
    if (!std::isfinite(x)) return false;
  return true;
}

GridDims cp4(int u) {
  GridDims d{1, 4, 1};
  d.cp_a2a = u;
  return d;
}

void PrintTo(const OverlapCase& c, std::ostream* os) { *os << c.name; }

class A2aOverlap : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(A2aOverlap, PipelinedEqualsBlockingBitForBit) {
  const OverlapCase c = GetParam();
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  std::shared_ptr<Comm> sub = sub_world(4);
  if (!sub) return;
  ProcessGrid grid = ProcessGrid::create(sub, cp4(c.u));
  ASSERT_EQ(grid.a2a().size(), c.u);
  const RingAttentionShape shape{2, 24, c.heads, c.kv_heads, 8, DType::f32};  // B 2, n 24 per rank, D 8
  const Layout layout = c.u == 4 ? Layout::contiguous : Layout::zigzag;
  Arena arena(Device::cpu(), size_t(16) << 20);
  ContextAttention pipelined(grid.ring(), grid.a2a(), layout, /*causal=*/true, shape, arena, DType::f32, c.groups);
  ContextAttention blocking(grid.ring(), grid.a2a(), layout, /*causal=*/true, shape, arena, DType::f32, 1);
  ASSERT_EQ(pipelined.exchange().head_groups, c.expected_groups);
  ASSERT_EQ(blocking.exchange().head_groups, 1);

  const Buffers in = make_buffers(shape, 300 + uint32_t(sub->rank()));
  const Buffers got = run(pipelined, shape, in);
  const Buffers ref = run(blocking, shape, in);
  ASSERT_TRUE(all_finite(ref.out) && all_finite(ref.dq) && all_finite(ref.dk) && all_finite(ref.dv))
      << "the blocking path left outputs unwritten";
  EXPECT_EQ(bit_differences(got.out, ref.out), 0u) << "O";
  EXPECT_EQ(bit_differences(got.dq, ref.dq), 0u) << "dQ";
  EXPECT_EQ(bit_differences(got.dk, ref.dk), 0u) << "dK";
  EXPECT_EQ(bit_differences(got.dv, ref.dv), 0u) << "dV";

  // Both report the exchange: compute (its packing and the ring) and the time blocked on it; one ring call per head
  // group, forward and backward.
  for (ContextAttention* a : {&pipelined, &blocking}) {
    const RingTimings& t = a->timings();
    EXPECT_EQ(t.calls, 2 * a->exchange().head_groups);
    EXPECT_GT(t.compute_s, 0.0);
    EXPECT_GT(t.exposed_a2a_s, 0.0);
  }
}

// {name, u, H, Hkv, groups (0 = default), expected groups}
INSTANTIATE_TEST_SUITE_P(
    Grids, A2aOverlap,
    ::testing::Values(OverlapCase{"cp4_u4_mha", 4, 8, 8, 0, 2},           // hq = hk = 2: two groups of one head
                      OverlapCase{"cp4_u2_gqa", 2, 8, 4, 0, 2},           // ring of 2; hq 4, hk 2
                      OverlapCase{"cp4_u2_mha_depth4", 2, 8, 8, 4, 4},    // hk 4: four groups
                      OverlapCase{"cp4_u4_gqa_depth2", 4, 16, 8, 0, 2},   // hq 4, hk 2
                      OverlapCase{"cp4_u4_gqa_replicated", 4, 8, 2, 0, 1},  // hk 1 on 4 ranks of 2 KV heads
                      OverlapCase{"cp4_u2_gqa_replicated", 2, 4, 1, 0, 1}), // MQA: hk 1 on both ranks
    [](const ::testing::TestParamInfo<OverlapCase>& info) { return std::string(info.param.name); });

// A pipeline depth that does not divide the KV heads is refused, naming the numbers.
TEST(A2aOverlapShape, RefusesGroupsNotDividingKvHeads) {
  const RingAttentionShape shape{1, 16, 8, 8, 8, DType::f32};
  EXPECT_EQ(head_exchange_shape(shape, 4, 0).head_groups, 2);
  EXPECT_EQ(head_exchange_shape(shape, 8, 0).head_groups, 1);  // hk 1
  try {
    head_exchange_shape(shape, 4, 4);  // hk 2
    FAIL() << "4 head groups over 2 KV heads were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 head groups must divide the 2 KV heads"), std::string::npos) << e.what();
  }
}

// A rank of the a2a group that arrives late: the wait shows as exposed all-to-all time on the others.
TEST(A2aOverlapTiming, LateRankShowsAsExposedA2a) {
  constexpr double kDelaySeconds = 0.25;
  if (world_size() < 4) GTEST_SKIP() << "needs 4 ranks";
  std::shared_ptr<Comm> sub = sub_world(4);
  if (!sub) return;
  ProcessGrid grid = ProcessGrid::create(sub, cp4(4));
  const RingAttentionShape shape{1, 16, 8, 8, 8, DType::f32};
  Arena arena(Device::cpu(), size_t(8) << 20);
  ContextAttention attn(grid.ring(), grid.a2a(), Layout::contiguous, /*causal=*/true, shape, arena);
  ASSERT_EQ(attn.exchange().head_groups, 2);
  Buffers b = make_buffers(shape, 500 + uint32_t(sub->rank()));
  Tensor lse(b.lse.data(), DType::f32, Device::cpu(), {int64_t(b.lse.size())});
  auto forward = [&] {
    attn.forward(t4(b.q, shape, 8), t4(b.k, shape, 8), t4(b.v, shape, 8), t4(b.out, shape, 8), lse);
  };
  forward();  // warm-up, everybody on time
  attn.reset_timings();
  sub->barrier();
  if (sub->rank() == 1) std::this_thread::sleep_for(std::chrono::duration<double>(kDelaySeconds));
  forward();
  const RingTimings& t = attn.timings();
  if (sub->rank() != 1) {
    EXPECT_GE(t.exposed_a2a_s, 0.8 * kDelaySeconds) << "rank " << sub->rank() << " waited for rank 1";
    EXPECT_LT(t.compute_s, 0.5 * kDelaySeconds) << "the wait was counted as compute";
  }
  EXPECT_EQ(t.exposed_comm_s, 0.0) << "u = cp: no ring hops";
}

}  // namespace
