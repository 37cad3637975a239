// Tensor-parallel helpers: head partitions (split and replicated KV heads), shard ranges, and a row-parallel
// linear layer whose partial outputs tp_all_reduce sums back to the full result.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <vector>

#include "parallel/comm/mpi_comm.h"
#include "parallel/comm/tensor_parallel.h"

using namespace rt;

TEST(TensorParallel, HeadPartitionCoversHeadsAndKeepsGqaMapping) {
  struct Case { int64_t H, Hkv; int tp; };
  for (Case c : {Case{8, 8, 4}, Case{8, 4, 2}, Case{8, 2, 4}, Case{4, 1, 4}, Case{12, 4, 4}, Case{6, 3, 1}, Case{16, 2, 8}}) {
    SCOPED_TRACE("H=" + std::to_string(c.H) + " Hkv=" + std::to_string(c.Hkv) + " tp=" + std::to_string(c.tp));
    std::vector<int> owner(size_t(c.H), 0);
    for (int t = 0; t < c.tp; ++t) {
      const HeadPartition p = partition_heads(c.H, c.Hkv, c.tp, t);
      EXPECT_EQ(p.q_heads.size(), c.H / c.tp);
      EXPECT_EQ(p.kv_replicated, c.Hkv < c.tp);
      ASSERT_GT(p.kv_heads.size(), 0);
      ASSERT_EQ(p.q_heads.size() % p.kv_heads.size(), 0);
      const int64_t local_group = p.q_heads.size() / p.kv_heads.size();
      for (int64_t h = p.q_heads.begin; h < p.q_heads.end; ++h) {
        owner[size_t(h)] += 1;
        // The kernel's local mapping must pick the KV head the global model uses.
        EXPECT_EQ(p.kv_heads.begin + (h - p.q_heads.begin) / local_group, h / (c.H / c.Hkv)) << "head " << h;
      }
      EXPECT_EQ(head_rows(p.q_heads, 16).begin, p.q_heads.begin * 16);
      EXPECT_EQ(head_rows(p.q_heads, 16).size(), p.q_heads.size() * 16);
    }
    for (int64_t h = 0; h < c.H; ++h) EXPECT_EQ(owner[size_t(h)], 1) << "head " << h;
  }
  EXPECT_THROW(partition_heads(6, 6, 4, 0), Error);  // H % tp
  EXPECT_THROW(partition_heads(12, 3, 4, 0), Error); // 3 KV heads cannot be split or replicated over 4
  EXPECT_THROW(partition_heads(8, 3, 2, 0), Error);  // H % Hkv
  EXPECT_THROW(column_parallel_rows(10, 4, 0), Error);
  EXPECT_EQ(column_parallel_rows(12, 4, 3).begin, 9);
  EXPECT_EQ(row_parallel_cols(12, 3, 1).end, 8);
}

TEST(TensorParallel, RowParallelLinearAllReducesToFullOutput) {
  auto world = make_mpi_world_comm();
  const int tp = world->size(), t = world->rank();
  const int64_t N = 5, in = 4 * int64_t(tp), out = 3;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(N * in)), w(size_t(out * in));  // (N, in), (out, in): same on every rank
  for (float& e : x) e = normal(rng);
  for (float& e : w) e = normal(rng);
  const ShardRange cols = row_parallel_cols(in, tp, t);
  std::vector<float> y(size_t(N * out), std::nanf(""));  // (N, out) partial sums over this rank's columns
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < out; ++o) {
      float s = 0;
      for (int64_t c = cols.begin; c < cols.end; ++c) s += x[size_t(i * in + c)] * w[size_t(o * in + c)];
      y[size_t(i * out + o)] = s;
    }
  tp_all_reduce(*world, Tensor(y.data(), DType::f32, Device::cpu(), {N, out}));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double ref = 0;
      for (int64_t c = 0; c < in; ++c) ref += double(x[size_t(i * in + c)]) * w[size_t(o * in + c)];
      EXPECT_NEAR(y[size_t(i * out + o)], ref, 1e-5 * (1 + std::abs(ref))) << "row " << i << " col " << o;
    }
}
