// fwd v5's query rows per CTA (kernels/cuda/attention/attn_fwd_sm90ws.cu, fwd_ws_rows_for): which tile height each kind of call
// gets, and what the override may force. A pure host function: needs no device.
#include <gtest/gtest.h>

#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"

namespace rt::test {
namespace {

constexpr int64_t kSms = 132;  // an H200

// A call without documents or override, over query rows [q_begin, q_end) of B x H heads.
int rows(int64_t D, int64_t q_begin, int64_t q_end, int64_t B, int64_t H) {
  return cuda::fwd_ws_rows_for(D, false, q_begin, q_end, B, H, kSms, 0);
}

TEST(AttnFwdRows, HeadDim64TakesSixtyFourRowsUnder4KQueryRows) {
  EXPECT_EQ(rows(64, 0, 2048, 1, 32), 64);     // a cp = 8 ring step at 16K (the diagonal, a half-key step)
  EXPECT_EQ(rows(64, 1024, 2048, 1, 32), 64);  // a half-query step: 1K rows of 2K
  EXPECT_EQ(rows(64, 0, 1024, 32, 32), 64);    // a whole 1K call
  EXPECT_EQ(rows(64, 0, 4095, 1, 32), 64);
}

TEST(AttnFwdRows, HeadDim64TakesOneNinetyTwoRowsFrom4KWhereTheWavesAreAsFull) {
  EXPECT_EQ(rows(64, 0, 16384, 1, 32), 192);  // 2752 CTAs of 192 rows fill 21 waves as well as 4096 of 128 fill 32
  EXPECT_EQ(rows(64, 0, 4096, 8, 32), 192);
  EXPECT_EQ(rows(64, 0, 65536, 1, 32), 192);
  // One (batch, head) of 4K rows: 22 CTAs of 192 rows are one wave of 192-row CTAs against one of 128: 128.
  EXPECT_EQ(rows(64, 0, 4096, 1, 1), 128);
}

TEST(AttnFwdRows, HeadDim128AndDocumentsKeep128Rows) {
  EXPECT_EQ(rows(128, 0, 2048, 1, 16), 128);
  EXPECT_EQ(rows(128, 0, 16384, 1, 16), 128);
  EXPECT_EQ(cuda::fwd_ws_rows_for(64, true, 0, 2048, 1, 32, kSms, 0), 128);
  EXPECT_EQ(cuda::fwd_ws_rows_for(64, true, 0, 16384, 1, 32, kSms, 0), 128);
  EXPECT_EQ(cuda::fwd_ws_rows_for(64, true, 0, 2048, 1, 32, kSms, 64), 128);  // not even when forced
}

TEST(AttnFwdRows, TheOverrideForcesEveryHeightWhereItFits) {
  EXPECT_EQ(cuda::fwd_ws_rows_for(128, false, 0, 16384, 1, 16, kSms, 64), 64);
  EXPECT_EQ(cuda::fwd_ws_rows_for(64, false, 0, 16384, 1, 32, kSms, 64), 64);
  EXPECT_EQ(cuda::fwd_ws_rows_for(64, false, 0, 2048, 1, 32, kSms, 128), 128);
  EXPECT_EQ(cuda::fwd_ws_rows_for(64, false, 0, 2048, 1, 32, kSms, 192), 192);
  EXPECT_EQ(cuda::fwd_ws_rows_for(64, false, 0, 160, 1, 32, kSms, 192), 128);    // a 192-row box exceeds q_end
  EXPECT_EQ(cuda::fwd_ws_rows_for(128, false, 0, 16384, 1, 16, kSms, 192), 128);  // 192 only at D = 64
}

}  // namespace
}  // namespace rt::test
