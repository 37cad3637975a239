// CPU copy_rows (kernels/strided_rows.h) against a plain index loop in fp64: overwrite and accumulate, a bf16
// destination, the rows it must leave alone, and refusals of rows outside the tensors.
#include <gtest/gtest.h>

#include "tests/unit/test_reference.h"

namespace rt {
namespace {
using test::HostTensor;

StridedRows geometry() {
  StridedRows g;
  g.blocks = 3, g.rows = 4, g.width = 5;
  g.src_offset = 1, g.src_block_stride = 30, g.src_row_stride = 7;
  g.dst_offset = 3, g.dst_block_stride = 24, g.dst_row_stride = 6;
  return g;
}

// dst after the copy, computed element by element.
std::vector<double> reference(const HostTensor& dst, const HostTensor& src, const StridedRows& g, bool accumulate) {
  std::vector<double> out = dst.to_double();
  for (int64_t b = 0; b < g.blocks; ++b)
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t j = 0; j < g.width; ++j) {
        const int64_t d = g.dst_offset + b * g.dst_block_stride + r * g.dst_row_stride + j;
        const double x = src[g.src_offset + b * g.src_block_stride + r * g.src_row_stride + j];
        out[size_t(d)] = accumulate ? out[size_t(d)] + x : x;
      }
  return out;
}

TEST(CopyRowsCpu, OverwriteAndAccumulateMatchTheIndexLoop) {
  const StridedRows g = geometry();
  HostTensor src = test::random_f32({90}, 11);  // rows read up to element 87
  for (bool accumulate : {false, true}) {
    HostTensor d = test::random_f32({80}, accumulate ? 13 : 14);  // rows written up to element 74
    const std::vector<double> ref = reference(d, src, g, accumulate);
    copy_rows(d, src, g, accumulate);
    for (int64_t k = 0; k < d.numel(); ++k) ASSERT_NEAR(d[k], ref[size_t(k)], 1e-6) << "element " << k;
  }
}

TEST(CopyRowsCpu, Bf16DestinationRoundsOnce) {
  const StridedRows g = geometry();
  HostTensor src = test::random_f32({90}, 15), d = HostTensor(DType::bf16, {80});
  fill(d, 2.f);
  copy_rows(d, src, g, false);
  const uint16_t* p = d.t.ptr<uint16_t>();
  EXPECT_EQ(bf16_to_float(p[0]), 2.f);  // before the first row: untouched
  EXPECT_EQ(bf16_to_float(p[3]), bf16_to_float(float_to_bf16(src[1])));
  EXPECT_EQ(bf16_to_float(p[3 + 24 + 6 + 4]), bf16_to_float(float_to_bf16(src[1 + 30 + 7 + 4])));
}

TEST(CopyRowsCpu, RefusesRowsOutsideTheTensors) {
  StridedRows g = geometry();
  HostTensor src = test::random_f32({90}, 16), dst = test::f32({80});
  g.dst_block_stride = 28;  // the last row ends at 3 + 56 + 18 + 5 = 82 > 80
  EXPECT_THROW(copy_rows(dst, src, g, false), Error);
  g = geometry();
  g.src_row_stride = 12;  // 1 + 60 + 36 + 5 = 102 > 90
  EXPECT_THROW(copy_rows(dst, src, g, false), Error);
}

}  // namespace
}  // namespace rt
