// The op profile (kernels/op_profile.h) used by bench_train_step --profile: inside a window every CUDA op is
// timed once under its name, ops outside the window are not, and the GPU times are positive and no larger
// than the window's wall time.
#include <gtest/gtest.h>

#include <chrono>

#include "kernels/op_profile.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {
namespace {

const OpTime* find(const std::vector<OpTime>& ops, const std::string& name) {
  for (const OpTime& op : ops)
    if (op.name == name) return &op;
  return nullptr;
}

TEST(OpProfile, TimesEachCudaOpInsideTheWindowOnly) {
  RT_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  constexpr int64_t n = 2048;
  Buffer a(gpu, DType::bf16, {n, n}), b(gpu, DType::bf16, {n, n}), c(gpu, DType::bf16, {n, n});  // (n, n) each
  fill(a, 0.5f), fill(b, 0.25f);
  gemm(c, a, b, false, true, 1.f, 0.f);  // before the window: not counted
  EXPECT_FALSE(op_profile_active());

  const auto t0 = std::chrono::steady_clock::now();
  op_profile_begin();
  EXPECT_TRUE(op_profile_active());
  for (int i = 0; i < 3; ++i) gemm(c, a, b, false, true, 1.f, 0.f);
  fill(a, 1.f);
  const std::vector<OpTime> ops = op_profile_end();
  const double wall_ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(op_profile_active());
  gemm(c, a, b, false, true, 1.f, 0.f);  // after the window: not counted

  ASSERT_EQ(ops.size(), 2u);
  const OpTime* g = find(ops, "gemm");
  const OpTime* f = find(ops, "fill");
  ASSERT_NE(g, nullptr);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(g->calls, 3);
  EXPECT_EQ(f->calls, 1);
  EXPECT_GT(g->ms, 0.0);
  EXPECT_GT(f->ms, 0.0);
  EXPECT_LE(g->ms + f->ms, wall_ms);
  EXPECT_EQ(ops.front().name, "gemm");  // three 2048^3 GEMMs outlast one fill of 4M elements

  op_profile_begin();  // a new window starts empty
  EXPECT_TRUE(op_profile_end().empty());
}

}  // namespace
}  // namespace rt::test
