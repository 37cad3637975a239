// Ring attention on real ranks against an fp64 single-rank reference, after un-permuting: O, LSE, dQ, dK, dV
// for cp in {1, 2, 3, 4} (sub-rings of the world; idle ranks wait), every layout, causal and not, GQA.
// The error must not grow with cp: err(cp) <= 2 * err(cp = 1) + kSlack.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/arena.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"
#include "tests/mpi/mpi_world.h"
#include "tests/mpi/ring_attention_harness.h"

using namespace rt;

namespace {

constexpr double kTolerance = 2e-5;  // relative L2 error vs the fp64 reference (f32 compute)
constexpr double kSlack = 2e-6;      // absolute slack on the "does not grow with cp" check

// B = 2, H = 4, Hkv = 2, D = 8; T divisible by 2*cp for cp = 1..4. The ring runs on host f32 tensors.
test::AttentionProblem make_problem(uint64_t seed, int64_t T) {
  return test::make_attention_problem(seed, 2, T, 4, 2, 8, /*round_to_bf16=*/false);
}
const test::RingTensors kOnHost{Device::cpu(), DType::f32, size_t(4) << 20};

using rt::test::world_size;

}  // namespace

class RingAttentionSweep : public ::testing::TestWithParam<std::tuple<Layout, bool>> {};

TEST_P(RingAttentionSweep, MatchesSingleRankReferenceForEveryCp) {
  const auto [layout, causal] = GetParam();
  // 24 tokens: a handful per rank; 120 tokens: blocks span several kernel tiles.
  for (int64_t T : {24, 120}) {
    const test::AttentionProblem p = make_problem(1234 + uint64_t(layout) * 10 + uint64_t(causal) + uint64_t(T), T);
    const test::AttentionReference ref = test::attention_reference(p, causal);
    test::RelErrors base{};
    for (int cp = 1; cp <= std::min(4, world_size()); ++cp) {
      double bad = 0;
      const test::RelErrors rel = test::run_ring(p, ref, cp, layout, causal, kOnHost, &bad);
      EXPECT_EQ(bad, 0) << "non-finite outputs with cp=" << cp;
      if (cp == 1) base = rel;
      int world_rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      if (world_rank == 0)
        std::printf("  T=%d %s %s cp=%d rel err: O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e\n", int(T),
                    layout_name(layout), causal ? "causal" : "full", cp, rel[0], rel[1], rel[2], rel[3], rel[4]);
      for (int i = 0; i < test::kNumQuantities; ++i) {
        const char* name = test::kQuantityNames[i];
        EXPECT_LT(rel[size_t(i)], kTolerance) << name << " cp=" << cp;
        EXPECT_LE(rel[size_t(i)], 2 * base[size_t(i)] + kSlack) << name << " error grows with cp: cp=" << cp << " "
                                                                << rel[size_t(i)] << " vs cp=1 " << base[size_t(i)];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RingAttentionSweep,
                         ::testing::Combine(::testing::Values(Layout::contiguous, Layout::zigzag, Layout::striped),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(layout_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_causal" : "_full");
                         });

// A long ring (registered with mpirun -np 8): cp = 1, 2, 4, 8 on one problem, zigzag causal and contiguous
// full, f32 on the host. The ring adds no error as it grows: every cp within 2x of cp = 1 (+ slack).
TEST(RingAttentionLongRing, ErrorDoesNotGrowUpToCp8) {
  if (world_size() < 8) GTEST_SKIP() << "needs 8 ranks (ctest runs it as mpi_ring_attention_np8)";
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  for (const auto& [layout, causal] : {std::pair{Layout::zigzag, true}, std::pair{Layout::contiguous, false}}) {
    const test::AttentionProblem p = make_problem(777 + uint64_t(causal), 128);  // 128 = 8 chunks of 16
    const test::AttentionReference ref = test::attention_reference(p, causal);
    test::RelErrors base{};
    for (int cp : {1, 2, 4, 8}) {
      double bad = 0;
      const test::RelErrors rel = test::run_ring(p, ref, cp, layout, causal, kOnHost, &bad);
      EXPECT_EQ(bad, 0) << "non-finite outputs with cp=" << cp;
      if (cp == 1) base = rel;
      if (world_rank == 0)
        std::printf("  T=128 %s %s cp=%d rel err: O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e\n", layout_name(layout),
                    causal ? "causal" : "full", cp, rel[0], rel[1], rel[2], rel[3], rel[4]);
      for (int i = 0; i < test::kNumQuantities; ++i) {
        EXPECT_LT(rel[size_t(i)], kTolerance) << test::kQuantityNames[i] << " cp=" << cp;
        EXPECT_LE(rel[size_t(i)], 2 * base[size_t(i)] + kSlack)
            << test::kQuantityNames[i] << " error grows with cp: cp=" << cp << " " << rel[size_t(i)] << " vs cp=1 "
            << base[size_t(i)];
      }
    }
  }
}

// The ring's sizes are checked up front with messages that name the fix.
TEST(RingAttention, RejectsBadShapes) {
  LocalComm local;
  Arena arena = Arena::measuring(Device::cpu());
  EXPECT_THROW(RingAttention(local, Layout::zigzag, true, {1, 7, 4, 2, 8, DType::f32}, arena), Error);
  EXPECT_THROW(RingAttention(local, Layout::contiguous, true, {1, 8, 4, 3, 8, DType::f32}, arena), Error);
  RingAttention ok(local, Layout::zigzag, true, {1, 8, 4, 2, 8, DType::f32}, arena);
  std::vector<float> x(1024, 1.f);
  Tensor bad(x.data(), DType::f32, Device::cpu(), {1, 8, 4, 4});
  Tensor lse(x.data(), DType::f32, Device::cpu(), {1, 4, 8});
  EXPECT_THROW(ok.forward(bad, bad, bad, bad, lse), Error);
}

// The ring order is fixed, so a second call on the same object (as every layer reuses it) is bitwise equal.
TEST(RingAttention, ReusedObjectIsBitwiseDeterministic) {
  auto world = make_mpi_world_comm();
  const int64_t B = 1, n = 16, H = 4, Hkv = 1, D = 8;
  std::mt19937 rng(99 + unsigned(world->rank()));
  std::normal_distribution<float> normal;
  std::vector<float> q(size_t(B * n * H * D)), k(size_t(B * n * Hkv * D)), v(k.size()), dout(q.size());
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = normal(rng);
  Arena arena(Device::cpu(), size_t(1) << 20);
  RingAttention attn(*world, Layout::zigzag, true, {B, n, H, Hkv, D, DType::f32}, arena);
  auto t4 = [&](std::vector<float>& x, int64_t heads) {
    return Tensor(x.data(), DType::f32, Device::cpu(), {B, n, heads, D});
  };
  std::vector<float> results[2];
  for (int run = 0; run < 2; ++run) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> out(q.size(), nan), lse(size_t(B * H * n), nan), dq(q.size(), nan), dk(k.size(), nan),
        dv(v.size(), nan);
    Tensor lse_t(lse.data(), DType::f32, Device::cpu(), {B, H, n});
    attn.forward(t4(q, H), t4(k, Hkv), t4(v, Hkv), t4(out, H), lse_t);
    attn.backward(t4(q, H), t4(k, Hkv), t4(v, Hkv), t4(out, H), t4(dout, H), lse_t, t4(dq, H), t4(dk, Hkv),
                  t4(dv, Hkv));
    for (auto* x : {&out, &lse, &dq, &dk, &dv}) results[run].insert(results[run].end(), x->begin(), x->end());
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    ASSERT_TRUE(std::isfinite(results[0][i])) << "index " << i;
    ASSERT_EQ(std::memcmp(&results[0][i], &results[1][i], sizeof(float)), 0) << "index " << i;
  }
}
