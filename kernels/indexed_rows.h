// The shapes of the indexed row ops (gather_rows, scatter_add_rows in kernels/op_list.inc), checked the same way by
// every backend before it touches memory. Kept C++17 (nvcc compiles it).
#pragma once
#include <cstdint>

#include "kernels/tensor.h"

namespace rt {

// The rows of one call: `rows` index entries (M), each row `width` elements (W), the indexed tensor's `table_rows` (N).
struct IndexedRows {
  int64_t rows = 0, width = 0, table_rows = 0;
};

// gather (gather_rows): dst (M, W), src (N, W), index (M). Otherwise (scatter_add_rows): dst (N, W) f32, src (M, W),
// index (M). dst and src are 2-D f32 / bf16 on one device, index a defined i32 tensor of M entries on that device.
// Throws rt::Error naming `op`, the argument and its shape otherwise.
IndexedRows check_indexed_rows(const Tensor& dst, const Tensor& src, const Tensor& index, bool gather, const char* op);

}  // namespace rt
