// check_strided_rows (kernels/strided_rows.h): the bounds every backend's copy_rows checks before it copies.
#include "kernels/strided_rows.h"

namespace rt {
namespace {

// The last element (exclusive) that rows of this geometry touch from `offset`.
int64_t extent(const StridedRows& g, int64_t offset, int64_t block_stride, int64_t row_stride) {
  return offset + (g.blocks - 1) * block_stride + (g.rows - 1) * row_stride + g.width;
}

}  // namespace

void check_strided_rows(const Tensor& dst, const Tensor& src, const StridedRows& g, const char* op) {
  RT_CHECK(g.blocks >= 0 && g.rows >= 0 && g.width >= 0 && g.dst_offset >= 0 && g.src_offset >= 0 &&
               g.dst_block_stride >= 0 && g.dst_row_stride >= 0 && g.src_block_stride >= 0 && g.src_row_stride >= 0,
           op << ": negative count, offset or stride (blocks=" << g.blocks << " rows=" << g.rows << " width=" << g.width
              << ")");
  if (g.elements() == 0) return;
  RT_CHECK(dst.device == src.device, op << ": src on " << src.device.str() << ", dst on " << dst.device.str());
  for (const Tensor* t : {&dst, &src})
    RT_CHECK(t->dtype == DType::f32 || t->dtype == DType::bf16,
             op << ": dtype " << dtype_name(t->dtype) << " is not f32 or bf16");
  RT_CHECK(extent(g, g.dst_offset, g.dst_block_stride, g.dst_row_stride) <= dst.numel(),
           op << ": rows written reach element " << extent(g, g.dst_offset, g.dst_block_stride, g.dst_row_stride)
              << " of dst " << dst.shape_str());
  RT_CHECK(extent(g, g.src_offset, g.src_block_stride, g.src_row_stride) <= src.numel(),
           op << ": rows read reach element " << extent(g, g.src_offset, g.src_block_stride, g.src_row_stride)
              << " of src " << src.shape_str());
}

}  // namespace rt
