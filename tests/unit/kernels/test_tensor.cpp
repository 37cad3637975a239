#include <gtest/gtest.h>

#include "kernels/arena.h"

namespace rt {

TEST(Tensor, ViewAndSlice) {
  Arena arena(Device::cpu(), 1 << 16);
  Tensor t = arena.alloc(DType::f32, {4, 3, 2}, "t");  // (4,3,2)
  EXPECT_EQ(t.numel(), 24);
  Tensor v = t.view({12, 2});
  EXPECT_EQ(v.size(-1), 2);
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.size(0), 2);
  EXPECT_EQ(s.ptr<float>() - t.ptr<float>(), 6);
  EXPECT_THROW(t.view({5, 5}), Error);
  EXPECT_THROW(t.slice(3, 5), Error);
}

TEST(Arena, RefusesOverflowWithItsName) {
  Arena arena(Device::cpu(), 1024);
  try {
    arena.alloc(DType::f32, {1000}, "big buffer");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("big buffer"), std::string::npos);
  }
}

TEST(Arena, MeasuringCountsBytes) {
  Arena m = Arena::measuring(Device::cpu());
  m.alloc(DType::f32, {100}, "a");
  m.alloc(DType::bf16, {1000}, "b");
  EXPECT_EQ(m.used(), 512u + 2048u);
}

TEST(Bf16, RoundTrip) {
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.5f)), 1.5f);
  EXPECT_NEAR(bf16_to_float(float_to_bf16(3.14159f)), 3.14159f, 0.02f);
}

}  // namespace rt
