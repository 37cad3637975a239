// gather_rows on the host: dst row i = src row index[i] (zeros for a negative index), converted through f32. The
// reference of the CUDA version and the gather scheme's packing on CPU ranks (parallel/cp/ring_attention_gather.cpp).
#include <cstring>

#include "kernels/cpu/cpu_util.h"
#include "kernels/indexed_rows.h"

namespace rt {
namespace cpu {

void gather_rows(Tensor dst, const Tensor& src, const Tensor& index) {
  const char* op = "gather_rows";
  const IndexedRows g = check_indexed_rows(dst, src, index, /*gather=*/true, op);
  RT_CHECK(dst.device.is_cpu(), op << ": expected host tensors, got " << dst.device.str());
  const int32_t* idx = index.ptr<int32_t>();  // (M)
  const bool same = dst.dtype == src.dtype;
  const size_t row_bytes = size_t(g.width) * dtype_size(dst.dtype);
  for (int64_t i = 0; i < g.rows; ++i)  // checked before anything is written
    RT_CHECK(idx[i] < g.table_rows,
             op << ": index[" << i << "] = " << idx[i] << " is past src's " << g.table_rows << " rows");
  for (int64_t i = 0; i < g.rows; ++i) {
    const int64_t s = idx[i];
    char* d = static_cast<char*>(dst.data) + size_t(i) * row_bytes;  // (W)
    if (s < 0) {
      std::memset(d, 0, row_bytes);  // +0.0 in f32 and bf16
    } else if (same) {
      std::memcpy(d, static_cast<const char*>(src.data) + size_t(s) * row_bytes, row_bytes);
    } else {
      for (int64_t j = 0; j < g.width; ++j) {
        const int64_t e = s * g.width + j, o = i * g.width + j;
        const float x = src.dtype == DType::bf16 ? bf16_to_float(src.ptr<uint16_t>()[e]) : src.ptr<float>()[e];
        if (dst.dtype == DType::bf16) dst.ptr<uint16_t>()[o] = float_to_bf16(x);
        else dst.ptr<float>()[o] = x;
      }
    }
  }
}

}  // namespace cpu
}  // namespace rt
