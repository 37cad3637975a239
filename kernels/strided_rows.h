// The geometry of a strided row copy (the copy_rows op): `blocks` x `rows` rows of `width` elements each, row
// (b, r) read at src_offset + b * src_block_stride + r * src_row_stride and written at the same formula of dst.
// All in elements. The all-to-all head exchange (parallel/cp/context_attention.h) packs and unpacks its buffers with
// it: (B, n, H, D) heads <-> (peer, B, n, W) chunks. Kept C++17 (nvcc compiles it).
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {

struct StridedRows {
  int64_t blocks = 1, rows = 0, width = 0;
  int64_t dst_offset = 0, dst_block_stride = 0, dst_row_stride = 0;
  int64_t src_offset = 0, src_block_stride = 0, src_row_stride = 0;
  int64_t elements() const { return blocks * rows * width; }
};

// Throws rt::Error naming `op` unless dst and src are f32 / bf16 on one device, the counts and strides are not
// negative, and every row read lies inside src and every row written inside dst.
void check_strided_rows(const Tensor& dst, const Tensor& src, const StridedRows& g, const char* op);

}  // namespace rt
