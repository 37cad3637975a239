// copy_rows on the host: strided rows of src into dst (kernels/strided_rows.h), converted through f32, overwriting or
// accumulating. The reference of the CUDA version and the all-to-all exchange's packing on CPU ranks.
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {
namespace {

float load(const Tensor& t, int64_t i) {
  return t.dtype == DType::bf16 ? bf16_to_float(t.ptr<uint16_t>()[i]) : t.ptr<float>()[i];
}
void store(const Tensor& t, int64_t i, float x) {
  if (t.dtype == DType::bf16) t.ptr<uint16_t>()[i] = float_to_bf16(x);
  else t.ptr<float>()[i] = x;
}

}  // namespace

void copy_rows(Tensor dst, const Tensor& src, const StridedRows& g, bool accumulate) {
  const char* op = "copy_rows";
  check_strided_rows(dst, src, g, op);
  if (g.elements() == 0) return;
  RT_CHECK(dst.device.is_cpu() && src.device.is_cpu(), op << ": expected host tensors");
  const bool plain = !accumulate && dst.dtype == DType::f32 && src.dtype == DType::f32;
  for (int64_t b = 0; b < g.blocks; ++b)
    for (int64_t r = 0; r < g.rows; ++r) {
      const int64_t d0 = g.dst_offset + b * g.dst_block_stride + r * g.dst_row_stride;
      const int64_t s0 = g.src_offset + b * g.src_block_stride + r * g.src_row_stride;
      if (plain) {
        const float* s = src.ptr<float>() + s0;  // (width)
        float* d = dst.ptr<float>() + d0;        // (width)
        for (int64_t j = 0; j < g.width; ++j) d[j] = s[j];
        continue;
      }
      for (int64_t j = 0; j < g.width; ++j)
        store(dst, d0 + j, accumulate ? load(dst, d0 + j) + load(src, s0 + j) : load(src, s0 + j));
    }
}

}  // namespace cpu
}  // namespace rt
