// MpiComm and ProcessGrid on real ranks: collectives, overlapping ring exchanges, grid coordinates.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "parallel/comm/mpi_comm.h"
#include "parallel/comm/process_grid.h"

using namespace rt;

namespace {
Tensor host_f32(std::vector<float>& v) { return Tensor(v.data(), DType::f32, Device::cpu(), {int64_t(v.size())}); }
// Distinct, rank-dependent, never-zero values.
float value(int rank, int64_t i) { return 1.f + float(rank) * 1000.f + float(i) * 0.5f; }
}  // namespace

TEST(MpiComm, AllReduceAndBroadcast) {
  auto world = make_mpi_world_comm();
  const int r = world->rank(), P = world->size();
  std::vector<float> v(1001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(r, int64_t(i));
  world->all_reduce_sum(host_f32(v));
  for (size_t i = 0; i < v.size(); ++i) {
    double want = 0;
    for (int q = 0; q < P; ++q) want += value(q, int64_t(i));
    ASSERT_NEAR(v[i], want, 1e-6 * std::abs(want)) << "element " << i;
  }
  double d[2] = {double(r) + 0.25, 1.0};
  world->all_reduce_sum(d, 2);
  EXPECT_DOUBLE_EQ(d[0], P * (P - 1) / 2.0 + 0.25 * P);
  EXPECT_DOUBLE_EQ(d[1], double(P));

  std::vector<float> b(17, std::nanf(""));
  if (r == P - 1) for (size_t i = 0; i < b.size(); ++i) b[i] = value(r, int64_t(i));
  world->broadcast(host_f32(b), P - 1);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], value(P - 1, int64_t(i)));

  std::vector<int> bad(3);
  EXPECT_THROW(world->all_reduce_sum(Tensor(bad.data(), DType::i32, Device::cpu(), {3})), Error);
}

TEST(MpiComm, OverlappingRingExchanges) {
  auto world = make_mpi_world_comm();
  const int r = world->rank(), P = world->size();
  const int prev = (r - 1 + P) % P;
  // Two exchanges of different sizes outstanding at once (as K/V and dK/dV are with cp = 2), waited in
  // reverse order; then a chain of double-buffered hops that returns every block to its owner.
  std::vector<float> a(300), b(77), ra(300, std::nanf("")), rb(77, std::nanf(""));
  for (size_t i = 0; i < a.size(); ++i) a[i] = value(r, int64_t(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = -value(r, int64_t(i));
  ExchangeHandle ha = world->ring_exchange_start(host_f32(a), host_f32(ra));
  ExchangeHandle hb = world->ring_exchange_start(host_f32(b), host_f32(rb));
  world->wait(hb);
  world->wait(ha);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(ra[i], value(prev, int64_t(i)));
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(rb[i], -value(prev, int64_t(i)));

  std::vector<float> buf[2] = {a, std::vector<float>(300, std::nanf(""))};
  for (int step = 0; step < P; ++step) {
    ExchangeHandle h = world->ring_exchange_start(host_f32(buf[step % 2]), host_f32(buf[(step + 1) % 2]));
    world->wait(h);
    const int source = ((r - step - 1) % P + P) % P;
    ASSERT_EQ(buf[(step + 1) % 2][5], value(source, 5)) << "step " << step;
  }
  EXPECT_THROW(world->wait(ha), Error);
  std::vector<float> small(3);
  EXPECT_THROW(world->ring_exchange_start(host_f32(a), host_f32(small)), Error);
}

TEST(ProcessGrid, CoordinatesAndGroups) {
  auto world = make_mpi_world_comm();
  const int P = world->size(), r = world->rank();
  std::vector<GridDims> grids = {{P, 1, 1}, {1, P, 1}, {1, 1, P}};
  if (P == 4) grids.push_back({1, 2, 2}), grids.push_back({2, 2, 1}), grids.push_back({2, 1, 2});
  for (GridDims dims : grids) {
    ProcessGrid g = ProcessGrid::create(world, dims);
    SCOPED_TRACE("dp=" + std::to_string(dims.dp) + " cp=" + std::to_string(dims.cp) + " tp=" + std::to_string(dims.tp));
    EXPECT_EQ(r, (g.dp_rank() * dims.cp + g.cp_rank()) * dims.tp + g.tp_rank());
    EXPECT_EQ(g.tp().size(), dims.tp);
    EXPECT_EQ(g.cp().size(), dims.cp);
    EXPECT_EQ(g.dp().size(), dims.dp);
    EXPECT_EQ(g.dp_cp().size(), dims.dp * dims.cp);
    EXPECT_EQ(g.tp().rank(), g.tp_rank());
    EXPECT_EQ(g.cp().rank(), g.cp_rank());
    EXPECT_EQ(g.dp().rank(), g.dp_rank());
    // Sum of world ranks within each group identifies the group's members.
    double s[4] = {double(r), double(r), double(r), double(r)};
    g.tp().all_reduce_sum(&s[0], 1);
    g.cp().all_reduce_sum(&s[1], 1);
    g.dp().all_reduce_sum(&s[2], 1);
    g.dp_cp().all_reduce_sum(&s[3], 1);
    double want[4] = {0, 0, 0, 0};
    for (int t = 0; t < dims.tp; ++t) want[0] += (g.dp_rank() * dims.cp + g.cp_rank()) * dims.tp + t;
    for (int c = 0; c < dims.cp; ++c) want[1] += (g.dp_rank() * dims.cp + c) * dims.tp + g.tp_rank();
    for (int d = 0; d < dims.dp; ++d) want[2] += (d * dims.cp + g.cp_rank()) * dims.tp + g.tp_rank();
    for (int d = 0; d < dims.dp; ++d)
      for (int c = 0; c < dims.cp; ++c) want[3] += (d * dims.cp + c) * dims.tp + g.tp_rank();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(s[i], want[i]) << "group " << i;
  }
  try {
    ProcessGrid::create(world, {P + 1, 1, 1});
    FAIL() << "expected rt::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("world size " + std::to_string(P)), std::string::npos) << m;
    EXPECT_NE(m.find("dp*cp*tp = " + std::to_string(P + 1)), std::string::npos) << m;
  }
  ProcessGrid local = ProcessGrid::local();
  EXPECT_EQ(local.cp().size(), 1);
}

// ZeRO's collectives: reduce-scatter (sum, rank r keeps block r) and all-gather (blocks in rank order), several
// outstanding at once and waited out of order, in place and not; CPU tensors here (GPU tensors: test_gpu_nccl).
TEST(MpiComm, ReduceScatterAndAllGatherAsync) {
  auto world = make_mpi_world_comm();
  const int r = world->rank(), P = world->size();
  const int64_t n = 37;  // elements per rank (odd: no alignment luck)
  std::vector<float> send(size_t(n * P)), recv(size_t(n), std::nanf(""));
  for (size_t i = 0; i < send.size(); ++i) send[i] = value(r, int64_t(i));
  std::vector<float> mine(static_cast<size_t>(n)), gathered(size_t(n * P), std::nanf(""));
  for (int64_t i = 0; i < n; ++i) mine[size_t(i)] = -value(r, i);
  std::vector<float> in_place(size_t(n * P), std::nanf(""));
  for (int64_t i = 0; i < n; ++i) in_place[size_t(r * n + i)] = 2.f * value(r, i);

  ExchangeHandle rs = world->reduce_scatter_sum_start(host_f32(send), host_f32(recv));
  ExchangeHandle ag = world->all_gather_start(host_f32(mine), host_f32(gathered));
  Tensor whole = host_f32(in_place);
  ExchangeHandle ip = world->all_gather_start(whole.slice(r * n, (r + 1) * n), whole);
  world->wait(ip);
  world->wait(ag);
  world->wait(rs);
  for (int64_t i = 0; i < n; ++i) {
    double want = 0;
    for (int q = 0; q < P; ++q) want += value(q, r * n + i);
    ASSERT_NEAR(recv[size_t(i)], want, 1e-6 * std::abs(want)) << "reduce-scatter element " << i;
  }
  for (int q = 0; q < P; ++q)
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(gathered[size_t(q * n + i)], -value(q, i)) << "all-gather block " << q << " element " << i;
      ASSERT_EQ(in_place[size_t(q * n + i)], 2.f * value(q, i)) << "in-place all-gather block " << q;
    }
  EXPECT_THROW(world->wait(rs), Error);  // already waited
  std::vector<float> wrong(size_t(n + 1));
  EXPECT_THROW(world->reduce_scatter_sum_start(host_f32(send), host_f32(wrong)), Error);
  EXPECT_THROW(world->all_gather_start(host_f32(mine), host_f32(wrong)), Error);
  // send and recv of a reduce-scatter may not overlap.
  Tensor s = host_f32(send);
  EXPECT_THROW(world->reduce_scatter_sum_start(s, s.slice(0, n)), Error);
}

namespace {
// The all-to-all of the head exchange (parallel/cp/context_attention.h): chunk s of rank r's send arrives as chunk r of
// rank s's recv; two exchanges outstanding at once stay apart. And the ring x a2a groups of a hybrid grid.
TEST(MpiComm, AllToAllOfEqualChunks) {
  auto world = make_mpi_world_comm();
  const int r = world->rank(), P = world->size();
  const int n = 3;  // elements per chunk
  std::vector<float> a(size_t(P * n)), b(size_t(P * n)), ra(size_t(P * n), -1.f), rb(size_t(P * n), -1.f);
  for (int s = 0; s < P; ++s)
    for (int i = 0; i < n; ++i) {
      a[size_t(s * n + i)] = float(100 * r + 10 * s + i);
      b[size_t(s * n + i)] = -float(100 * r + 10 * s + i) - 0.5f;
    }
  const ExchangeHandle ha = world->all_to_all_start(host_f32(a), host_f32(ra));
  const ExchangeHandle hb = world->all_to_all_start(host_f32(b), host_f32(rb));
  world->wait(hb);
  world->wait(ha);
  for (int s = 0; s < P; ++s)
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(ra[size_t(s * n + i)], float(100 * s + 10 * r + i)) << "chunk " << s << " element " << i;
      EXPECT_EQ(rb[size_t(s * n + i)], -float(100 * s + 10 * r + i) - 0.5f) << "chunk " << s << " element " << i;
    }
  std::vector<float> odd(size_t(P * n + 1));
  EXPECT_THROW(world->all_to_all_start(host_f32(odd), host_f32(odd)), Error);
}

TEST(ProcessGrid, RingAndAllToAllGroups) {
  auto world = make_mpi_world_comm();
  const int P = world->size();
  if (P % 2 != 0) GTEST_SKIP() << "needs an even world";
  GridDims d{1, P, 1};
  d.cp_a2a = 2;
  ProcessGrid g = ProcessGrid::create(world, d);
  EXPECT_EQ(g.a2a().size(), 2);
  EXPECT_EQ(g.ring().size(), P / 2);
  EXPECT_EQ(g.a2a().rank(), g.cp_rank() % 2);
  EXPECT_EQ(g.ring().rank(), g.cp_rank() / 2);
  // The a2a partners are consecutive cp ranks: the sum of the group's cp ranks is 2 * (cp_rank - a2a_rank) + 1.
  double sum = g.cp_rank();
  g.a2a().all_reduce_sum(&sum, 1);
  EXPECT_EQ(sum, 2.0 * (g.cp_rank() - g.a2a_rank()) + 1);
  GridDims bad{1, P, 1};
  bad.cp_a2a = P + 1;
  EXPECT_THROW(ProcessGrid::create(world, bad), Error);
}
}  // namespace
