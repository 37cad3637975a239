// The RoPE table built on several threads (framework/model/rope_table_threaded.h) equals the one-thread table bit
// for bit: random positions (a fresh seed each run), thread counts that do and do not divide the positions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "framework/model/rope_table_threaded.h"
#include "kernels/rope_table.h"

namespace rt {
namespace {

TEST(RopeTableThreaded, EqualsOneThreadBitForBit) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int32_t pairs = 32;
  std::vector<double> inv_freq(pairs);  // (pairs)
  for (int32_t i = 0; i < pairs; ++i) inv_freq[size_t(i)] = std::pow(500000.0, -2.0 * i / (2 * pairs));
  for (const int64_t n : {int64_t(100), int64_t(40000), int64_t(65537)}) {
    std::vector<int32_t> positions(static_cast<size_t>(n));  // (n)
    for (auto& p : positions) p = int32_t(rng() % 1000000);
    std::vector<float> want;
    build_rope_table(want, positions.data(), n, inv_freq.data(), pairs, 1.0);
    for (const int threads : {1, 3, 7}) {
      std::vector<float> got(want.size(), NAN);  // poisoned
      build_rope_table_threaded(got, positions.data(), n, inv_freq.data(), pairs, 1.0, threads);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << n << " positions on " << threads << " threads (seed " << seed << ")";
    }
  }
}

}  // namespace
}  // namespace rt
