// scatter_add_rows on the host: dst (f32) row index[i] += src row i, summed in f32; a negative index adds nothing.
// The reference of the CUDA version and the gather scheme's dK/dV return on CPU ranks
// (parallel/cp/ring_attention_gather.cpp).
// Refuses what the CUDA kernel cannot add correctly (a repeated index) or would skip (an index past dst).
#include <vector>

#include "kernels/cpu/cpu_util.h"
#include "kernels/indexed_rows.h"

namespace rt {
namespace cpu {

void scatter_add_rows(Tensor dst, const Tensor& src, const Tensor& index) {
  const char* op = "scatter_add_rows";
  const IndexedRows g = check_indexed_rows(dst, src, index, /*gather=*/false, op);
  RT_CHECK(dst.device.is_cpu(), op << ": expected host tensors, got " << dst.device.str());
  const int32_t* idx = index.ptr<int32_t>();  // (M)
  std::vector<uint8_t> hit(static_cast<size_t>(g.table_rows), 0);  // (N) rows named so far
  for (int64_t i = 0; i < g.rows; ++i) {  // checked before anything is added
    const int64_t d = idx[i];
    if (d < 0) continue;
    RT_CHECK(d < g.table_rows, op << ": index[" << i << "] = " << d << " is past dst's " << g.table_rows << " rows");
    RT_CHECK(!hit[size_t(d)], op << ": index[" << i << "] = " << d << " repeats an earlier entry; the entries must be "
                                 << "distinct (split the call so that each adds a row once)");
    hit[size_t(d)] = 1;
  }
  for (int64_t i = 0; i < g.rows; ++i) {
    const int64_t d = idx[i];
    if (d < 0) continue;
    float* out = dst.ptr<float>() + d * g.width;  // (W)
    if (src.dtype == DType::bf16) {
      const uint16_t* in = src.ptr<uint16_t>() + i * g.width;  // (W)
      for (int64_t j = 0; j < g.width; ++j) out[j] += bf16_to_float(in[j]);
    } else {
      const float* in = src.ptr<float>() + i * g.width;  // (W)
      for (int64_t j = 0; j < g.width; ++j) out[j] += in[j];
    }
  }
}

}  // namespace cpu
}  // namespace rt
