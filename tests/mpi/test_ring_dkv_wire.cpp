// The bf16-on-the-wire option for the travelling dK/dV accumulator (parallel.dkv_wire), under
// `mpirun -np 4`: rings of cp = 4 (the whole world) and cp = 2 (two rings side by side).
// The same inputs go through an f32-wire and a bf16-wire RingAttention. The error the bf16 wire adds,
// ||dK_bf16 - dK_f32|| / ||dK_f32|| (same for dV), must stay below 1e-2 (bf16 keeps 8 mantissa bits, one
// rounding per hop, at most cp-1 hops) and above 1e-5 (the bytes really were bf16). dQ and O never travel
// as gradients and must be bitwise identical. Rank 0 prints the measured errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <vector>

#include "parallel/comm/mpi_comm.h"
#include "parallel/cp/ring_attention.h"

using namespace rt;

namespace {

struct Grads {
  std::vector<float> out, dq, dk, dv;
};

Grads run(Comm& cp, DType wire, const RingAttentionShape& s, uint32_t seed) {
  const int64_t qn = s.batch * s.local_tokens * s.heads * s.head_dim;
  const int64_t kvn = s.batch * s.local_tokens * s.kv_heads * s.head_dim;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> q(static_cast<size_t>(qn)), k(static_cast<size_t>(kvn)), v(static_cast<size_t>(kvn)),
      dout(static_cast<size_t>(qn));
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = normal(rng);
  Grads g;
  g.out.assign(size_t(qn), std::nanf("")), g.dq.assign(size_t(qn), std::nanf(""));
  g.dk.assign(size_t(kvn), std::nanf("")), g.dv.assign(size_t(kvn), std::nanf(""));
  std::vector<float> lse(size_t(s.batch * s.heads * s.local_tokens), std::nanf(""));
  auto t4 = [&](std::vector<float>& x, int64_t heads) {
    return Tensor(x.data(), DType::f32, Device::cpu(), {s.batch, s.local_tokens, heads, s.head_dim});
  };
  Tensor lse_t(lse.data(), DType::f32, Device::cpu(), {s.batch, s.heads, s.local_tokens});
  Arena arena(Device::cpu(), size_t(8) << 20);
  RingAttention ring(cp, Layout::zigzag, /*causal=*/true, s, arena, wire);
  ring.forward(t4(q, s.heads), t4(k, s.kv_heads), t4(v, s.kv_heads), t4(g.out, s.heads), lse_t);
  ring.backward(t4(q, s.heads), t4(k, s.kv_heads), t4(v, s.kv_heads), t4(g.out, s.heads), t4(dout, s.heads), lse_t,
                t4(g.dq, s.heads), t4(g.dk, s.kv_heads), t4(g.dv, s.kv_heads));
  return g;
}

// ||a - b|| and ||b|| summed over the ring, so the ratio is over the whole sequence.
double ring_rel_err(Comm& cp, const std::vector<float>& a, const std::vector<float>& b) {
  double s[2] = {0, 0};
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a[i]) - b[i];
    s[0] += d * d, s[1] += double(b[i]) * b[i];
  }
  cp.all_reduce_sum(s, 2);
  return std::sqrt(s[0] / s[1]);
}

void check_wire(Comm& cp) {
  const RingAttentionShape shape{2, 32, 4, 2, 16, DType::f32};
  const uint32_t seed = 1000 + uint32_t(cp.rank());
  const Grads f32 = run(cp, DType::f32, shape, seed);
  const Grads bf16 = run(cp, DType::bf16, shape, seed);
  for (const auto* x : {&bf16.dq, &bf16.dk, &bf16.dv})
    for (float e : *x) ASSERT_TRUE(std::isfinite(e)) << "non-finite gradient with the bf16 wire";
  EXPECT_EQ(bf16.out, f32.out) << "the forward must not depend on the dK/dV wire";
  EXPECT_EQ(bf16.dq, f32.dq) << "dQ stays local and must not depend on the dK/dV wire";
  const double ek = ring_rel_err(cp, bf16.dk, f32.dk), ev = ring_rel_err(cp, bf16.dv, f32.dv);
  EXPECT_LT(ek, 1e-2) << "dK error added by the bf16 wire";
  EXPECT_LT(ev, 1e-2) << "dV error added by the bf16 wire";
  EXPECT_GT(ek, 1e-5) << "dK is unchanged: the accumulator did not travel as bf16";
  EXPECT_GT(ev, 1e-5) << "dV is unchanged: the accumulator did not travel as bf16";
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (cp.rank() == 0)
    std::printf("[ dkv_wire bf16, cp=%d (world rank %d) ] error added: dK %.2e, dV %.2e (relative to the f32 wire)\n",
                cp.size(), world_rank, ek, ev);
}

TEST(RingDkvWire, Bf16WireAddsBoundedErrorCp4) {
  auto world = make_mpi_world_comm();
  ASSERT_EQ(world->size(), 4) << "run with mpirun -np 4";
  check_wire(*world);
}

TEST(RingDkvWire, Bf16WireAddsBoundedErrorCp2) {
  auto world = make_mpi_world_comm();
  ASSERT_EQ(world->size(), 4) << "run with mpirun -np 4";
  std::shared_ptr<Comm> ring = world->split(world->rank() / 2, world->rank());  // two rings of 2
  check_wire(*ring);
}

TEST(RingDkvWire, OtherWireDtypesAreRefused) {
  LocalComm local;
  Arena arena = Arena::measuring(Device::cpu());
  EXPECT_THROW(RingAttention(local, Layout::zigzag, true, {1, 8, 2, 2, 8, DType::f32}, arena, DType::i32), Error);
}

}  // namespace
