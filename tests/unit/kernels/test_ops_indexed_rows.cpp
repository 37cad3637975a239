// CPU gather_rows / scatter_add_rows (kernels/op_list.inc) against plain fp64 loops: a random index list with
// negative entries (zero rows), a bf16 destination (one rounding), the f32 sum of a bf16 source, the rows the
// scatter must leave alone, and the refusals (an index past the table, a repeated scatter index, wrong shapes).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

// index (M) with entries in [-1, N): a random permutation's first M rows, every third one -1.
HostTensor random_index(int64_t M, int64_t N, uint64_t seed) {
  std::vector<int32_t> perm(static_cast<size_t>(N));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  HostTensor idx = test::i32({M});
  for (int64_t i = 0; i < M; ++i) idx.i()[i] = i % 3 == 2 ? -1 : perm[size_t(i)];
  return idx;
}

TEST(IndexedRowsCpu, GatherCopiesIndexedRowsAndZerosNegativeOnes) {
  const int64_t M = 11, N = 17, W = 5;
  const HostTensor src = test::random_f32({N, W}, 21, -2.f, 2.f);
  const HostTensor idx = random_index(M, N, 22);
  HostTensor dst = test::f32({M, W});
  test::poison(dst);
  gather_rows(dst, src, idx);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < W; ++j) {
      const int32_t s = idx.t.ptr<int32_t>()[i];
      const double want = s < 0 ? 0.0 : double(src[s * W + j]);
      ASSERT_EQ(double(dst[i * W + j]), want) << "row " << i << " (index " << s << ") column " << j;
    }
}

TEST(IndexedRowsCpu, GatherIntoBf16RoundsOnce) {
  const int64_t M = 6, N = 9, W = 4;
  const HostTensor src = test::random_f32({N, W}, 23);
  const HostTensor idx = random_index(M, N, 24);
  HostTensor dst(DType::bf16, {M, W});
  fill(dst, 3.f);
  gather_rows(dst, src, idx);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < W; ++j) {
      const int32_t s = idx.t.ptr<int32_t>()[i];
      const float want = s < 0 ? 0.f : bf16_to_float(float_to_bf16(src[s * W + j]));
      ASSERT_EQ(bf16_to_float(dst.t.ptr<uint16_t>()[i * W + j]), want) << "row " << i;
    }
}

TEST(IndexedRowsCpu, ScatterAddsEachRowOnceAndLeavesTheOthers) {
  const int64_t M = 8, N = 13, W = 6;
  HostTensor src(DType::bf16, {M, W});
  const HostTensor srcf = test::random_f32({M, W}, 25);
  copy_cast(src, srcf);
  const HostTensor idx = random_index(M, N, 26);
  HostTensor dst = test::random_f32({N, W}, 27);
  std::vector<double> want = dst.to_double();
  for (int64_t i = 0; i < M; ++i) {
    const int32_t d = idx.t.ptr<int32_t>()[i];
    if (d < 0) continue;
    for (int64_t j = 0; j < W; ++j)
      want[size_t(d * W + j)] += double(bf16_to_float(src.t.ptr<uint16_t>()[i * W + j]));
  }
  scatter_add_rows(dst, src, idx);
  for (int64_t k = 0; k < N * W; ++k) ASSERT_NEAR(dst[k], want[size_t(k)], 1e-6) << "element " << k;
  // A row no entry names is untouched: at least one exists (M < N).
  int untouched = 0;
  for (int64_t r = 0; r < N; ++r)
    if (std::find(idx.t.ptr<int32_t>(), idx.t.ptr<int32_t>() + M, int32_t(r)) == idx.t.ptr<int32_t>() + M)
      ++untouched;
  EXPECT_GT(untouched, 0);
}

TEST(IndexedRowsCpu, RefusesBadIndicesAndShapes) {
  const HostTensor src = test::random_f32({4, 3}, 28);
  HostTensor dst = test::f32({2, 3}), idx = test::i32({2});
  idx.i()[0] = 1, idx.i()[1] = 4;  // 4 is past src's 4 rows
  EXPECT_THROW(gather_rows(dst, src, idx), Error);
  HostTensor table = test::f32({4, 3});
  const HostTensor rows = test::random_f32({2, 3}, 29);
  idx.i()[0] = 2, idx.i()[1] = 2;  // repeated
  EXPECT_THROW(scatter_add_rows(table, rows, idx), Error);
  for (int64_t k = 0; k < table.numel(); ++k) EXPECT_EQ(table[k], 0.f) << "nothing is added before the check";
  HostTensor wide = test::f32({2, 4});
  idx.i()[1] = 0;
  EXPECT_THROW(gather_rows(wide, src, idx), Error);  // rows of different widths
  HostTensor short_idx = test::i32({1});
  EXPECT_THROW(gather_rows(dst, src, short_idx), Error);  // one entry per dst row
  HostTensor bf16_table(DType::bf16, {4, 3});
  EXPECT_THROW(scatter_add_rows(bf16_table, rows, idx), Error);  // the accumulator is f32
}

}  // namespace
}  // namespace rt
