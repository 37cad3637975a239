// Per-call timing of ring attention (parallel/cp/ring_timing.h): compute vs time blocked on the ring.
// Runs under `mpirun -np 2`. Rank 1 arrives late on purpose, so rank 0's exposed communication must
// contain that delay while its compute time does not.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"

using namespace rt;

namespace {

constexpr double kDelaySeconds = 0.25;

struct Inputs {
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
};

Inputs make_inputs(const RingAttentionShape& s, uint32_t seed) {
  const int64_t qn = s.batch * s.local_tokens * s.heads * s.head_dim;
  const int64_t kvn = s.batch * s.local_tokens * s.kv_heads * s.head_dim;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Inputs in;
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(size_t(n));
    for (float& e : x) e = normal(rng);
  };
  fill(in.q, qn), fill(in.k, kvn), fill(in.v, kvn), fill(in.dout, qn);
  in.out.assign(size_t(qn), std::nanf("")), in.dq.assign(size_t(qn), std::nanf(""));
  in.dk.assign(size_t(kvn), std::nanf("")), in.dv.assign(size_t(kvn), std::nanf(""));
  in.lse.assign(size_t(s.batch * s.heads * s.local_tokens), std::nanf(""));
  return in;
}

Tensor t4(std::vector<float>& x, const RingAttentionShape& s, int64_t heads) {
  return Tensor(x.data(), DType::f32, Device::cpu(), {s.batch, s.local_tokens, heads, s.head_dim});
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(RingTiming, LateNeighbourShowsAsExposedCommNotCompute) {
  auto world = make_mpi_world_comm();
  ASSERT_EQ(world->size(), 2) << "run with mpirun -np 2";
  const RingAttentionShape shape{1, 64, 4, 2, 16, DType::f32};
  Arena arena(Device::cpu(), size_t(4) << 20);
  RingAttention ring(*world, Layout::zigzag, /*causal=*/true, shape, arena);
  Inputs in = make_inputs(shape, 100 + uint32_t(world->rank()));
  Tensor lse(in.lse.data(), DType::f32, Device::cpu(), {shape.batch, shape.heads, shape.local_tokens});

  // Warm-up call (both ranks on time), then the timed one with rank 1 late.
  ring.forward(t4(in.q, shape, 4), t4(in.k, shape, 2), t4(in.v, shape, 2), t4(in.out, shape, 4), lse);
  ring.reset_timings();
  world->barrier();
  if (world->rank() == 1) std::this_thread::sleep_for(std::chrono::duration<double>(kDelaySeconds));
  const auto t0 = std::chrono::steady_clock::now();
  ring.forward(t4(in.q, shape, 4), t4(in.k, shape, 2), t4(in.v, shape, 2), t4(in.out, shape, 4), lse);
  const double wall = seconds_since(t0);
  const RingTimings f = ring.last_call_timings();
  EXPECT_EQ(f.calls, 1);
  EXPECT_EQ(f.steps, 2);
  EXPECT_GT(f.compute_s, 0.0);
  EXPECT_GE(f.exposed_comm_s, 0.0);
  EXPECT_LE(f.total_s(), wall + 1e-3) << "timed more than the call took";
  if (world->rank() == 0) {
    EXPECT_GE(f.exposed_comm_s, 0.6 * kDelaySeconds) << "rank 0 waited for late rank 1 but measured no wait";
    EXPECT_LT(f.compute_s, 0.5 * kDelaySeconds) << "the wait was counted as compute";
  }
  for (float x : in.out) ASSERT_TRUE(std::isfinite(x));

  // Backward accumulates into the same totals.
  ring.backward(t4(in.q, shape, 4), t4(in.k, shape, 2), t4(in.v, shape, 2), t4(in.out, shape, 4),
                t4(in.dout, shape, 4), lse, t4(in.dq, shape, 4), t4(in.dk, shape, 2), t4(in.dv, shape, 2));
  const RingTimings& total = ring.timings();
  EXPECT_EQ(total.calls, 2);
  EXPECT_EQ(total.steps, 4);
  EXPECT_GT(ring.last_call_timings().compute_s, 0.0);
  EXPECT_NEAR(total.compute_s, f.compute_s + ring.last_call_timings().compute_s, 1e-12);
  for (float x : in.dk) ASSERT_TRUE(std::isfinite(x));
  ring.reset_timings();
  EXPECT_EQ(ring.timings().calls, 0);
  EXPECT_EQ(ring.timings().exposed_comm_s, 0.0);
}

TEST(RingTiming, SingleRankRingHasNoCommTime) {
  LocalComm local;
  const RingAttentionShape shape{2, 32, 4, 4, 8, DType::f32};
  Arena arena(Device::cpu(), size_t(2) << 20);
  RingAttention ring(local, Layout::contiguous, /*causal=*/true, shape, arena);
  Inputs in = make_inputs(shape, 7);
  Tensor lse(in.lse.data(), DType::f32, Device::cpu(), {shape.batch, shape.heads, shape.local_tokens});
  ring.forward(t4(in.q, shape, 4), t4(in.k, shape, 4), t4(in.v, shape, 4), t4(in.out, shape, 4), lse);
  ring.backward(t4(in.q, shape, 4), t4(in.k, shape, 4), t4(in.v, shape, 4), t4(in.out, shape, 4),
                t4(in.dout, shape, 4), lse, t4(in.dq, shape, 4), t4(in.dk, shape, 4), t4(in.dv, shape, 4));
  EXPECT_EQ(ring.timings().calls, 2);
  EXPECT_EQ(ring.timings().steps, 2);
  EXPECT_GT(ring.timings().compute_s, 0.0);
  EXPECT_EQ(ring.timings().exposed_comm_s, 0.0);
}

}  // namespace
