// CPU fill, add_inplace, scale_inplace, copy_cast (f32 <-> bf16) and sum_squares against fp64.
#include <gtest/gtest.h>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

TEST(ElementwiseCpu, FillAddScale) {
  HostTensor y = test::random_f32({3, 7, 5}, 1), x = test::random_f32({3, 7, 5}, 2);
  std::vector<double> ref = y.to_double();
  for (int64_t k = 0; k < y.numel(); ++k) ref[size_t(k)] = (ref[size_t(k)] + x[k]) * -1.5;
  add_inplace(y, x);
  scale_inplace(y, -1.5f);
  EXPECT_LT(test::rel_err(y, ref), 1e-6);
  fill(y, 0.25f);
  for (int64_t k = 0; k < y.numel(); ++k) ASSERT_EQ(y[k], 0.25f);
  HostTensor other = test::f32({3, 35});
  EXPECT_THROW(add_inplace(y, other), Error);
}

TEST(ElementwiseCpu, CopyCastRoundTripsThroughBf16) {
  HostTensor a = test::random_f32({40, 3}, 3, -100.f, 100.f);
  HostTensor b = HostTensor(DType::bf16, {40, 3}), back = test::f32({40, 3});
  test::poison(back);
  copy_cast(b, a);
  copy_cast(back, b);
  EXPECT_LT(test::rel_err(back, a.to_double()), 4e-3);  // bf16 keeps 8 significant bits
  for (int64_t k = 0; k < a.numel(); ++k)
    ASSERT_EQ(back[k], bf16_to_float(float_to_bf16(a[k]))) << "round to nearest even at " << k;
  HostTensor same = test::f32({120});
  copy_cast(same, a);  // same element count, new shape
  EXPECT_EQ(test::rel_err(same, a.to_double()), 0.0);
  fill(b, 3.f);
  EXPECT_EQ(bf16_to_float(b.t.ptr<uint16_t>()[7]), 3.f);
}

TEST(ElementwiseCpu, SumSquaresInFp64) {
  HostTensor x = test::random_f32({1001}, 4, -3.f, 3.f);
  double ref = 0;
  for (int64_t k = 0; k < x.numel(); ++k) ref += double(x[k]) * x[k];
  EXPECT_NEAR(sum_squares(x), ref, 1e-12 * ref);
  HostTensor b = HostTensor(DType::bf16, {1001});
  copy_cast(b, x);
  double refb = 0;
  for (int64_t k = 0; k < x.numel(); ++k) {
    const double v = bf16_to_float(b.t.ptr<uint16_t>()[k]);
    refb += v * v;
  }
  EXPECT_NEAR(sum_squares(b), refb, 1e-12 * refb);
}

}  // namespace
}  // namespace rt
