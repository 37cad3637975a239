// Sequence layouts: every layout is a permutation of [0, seq_len) across cp ranks, with the documented order.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernels/tensor.h"
#include "parallel/schedule/layout.h"

using namespace rt;

TEST(Layout, ParseAndName) {
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped}) EXPECT_EQ(parse_layout(layout_name(l)), l);
  try {
    parse_layout("zig-zag");
    FAIL() << "expected rt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("contiguous, zigzag, striped"), std::string::npos) << e.what();
  }
}

TEST(Layout, EveryLayoutIsAPermutation) {
  for (Layout l : {Layout::contiguous, Layout::zigzag, Layout::striped}) {
    for (int cp : {1, 2, 3, 4, 8}) {
      const int64_t seq_len = 2 * cp * 5;
      std::vector<int64_t> all;
      for (int r = 0; r < cp; ++r) {
        auto p = layout_positions(l, seq_len, cp, r);
        ASSERT_EQ(int64_t(p.size()), seq_len / cp);
        all.insert(all.end(), p.begin(), p.end());
      }
      std::sort(all.begin(), all.end());
      std::vector<int64_t> want(static_cast<size_t>(seq_len));
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(all, want) << layout_name(l) << " cp=" << cp;
    }
  }
}

TEST(Layout, DocumentedOrder) {
  // seq_len 12, cp 3: zigzag chunks of 2; rank 1 holds chunks 1 and 4.
  EXPECT_EQ(layout_positions(Layout::zigzag, 12, 3, 1), (std::vector<int64_t>{2, 3, 8, 9}));
  EXPECT_EQ(layout_positions(Layout::zigzag, 12, 3, 0), (std::vector<int64_t>{0, 1, 10, 11}));
  EXPECT_EQ(layout_positions(Layout::contiguous, 12, 3, 2), (std::vector<int64_t>{8, 9, 10, 11}));
  EXPECT_EQ(layout_positions(Layout::striped, 12, 3, 1), (std::vector<int64_t>{1, 4, 7, 10}));
  // Zigzag local order is monotone in global position (the diagonal step relies on it).
  for (int r = 0; r < 4; ++r) {
    auto p = layout_positions(Layout::zigzag, 64, 4, r);
    EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
  }
}

TEST(Layout, ErrorsNameTheFix) {
  try {
    layout_positions(Layout::zigzag, 100, 3, 0);
    FAIL() << "expected rt::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("seq_len 100 is not divisible by 2*cp = 6 (zigzag)"), std::string::npos) << m;
    EXPECT_NE(m.find("layout contiguous"), std::string::npos) << m;
  }
  EXPECT_THROW(layout_positions(Layout::contiguous, 10, 3, 0), Error);
  EXPECT_THROW(layout_positions(Layout::striped, 12, 3, 3), Error);
  EXPECT_NO_THROW(layout_positions(Layout::contiguous, 9, 3, 0));
}
