// copy_cast on the host: out = in converted elementwise. Same element count; f32 <-> bf16 in any
// direction, or i32 -> i32. Host <-> device copies are handled by kernels/ops.cpp.
#include <cstring>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void copy_cast(Tensor out, const Tensor& in) {
  RT_CHECK(out.device.is_cpu() && in.device.is_cpu(),
           "copy_cast (cpu): expected host tensors, got " << in.device.str() << " -> " << out.device.str());
  RT_CHECK(out.numel() == in.numel(),
           "copy_cast: in " << in.shape_str() << " and out " << out.shape_str() << " differ in element count");
  const int64_t n = in.numel();
  if (n == 0) return;
  RT_CHECK(out.defined() && in.defined(), "copy_cast: in or out is not defined (null data)");
  if (out.dtype == in.dtype) {
    if (out.data != in.data) std::memmove(out.data, in.data, in.nbytes());
    return;
  }
  if (in.dtype == DType::f32 && out.dtype == DType::bf16) {
    const float* s = in.ptr<float>();  // (numel)
    uint16_t* d = out.ptr<uint16_t>(); // (numel)
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
    return;
  }
  if (in.dtype == DType::bf16 && out.dtype == DType::f32) {
    const uint16_t* s = in.ptr<uint16_t>();  // (numel)
    float* d = out.ptr<float>();             // (numel)
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
    return;
  }
  RT_CHECK(false, "copy_cast: cannot convert " << dtype_name(in.dtype) << " to " << dtype_name(out.dtype)
                                               << "; only f32 <-> bf16 and same-dtype copies are supported");
}

}  // namespace cpu
}  // namespace rt
