// fill: y = value everywhere. f32 (and bf16, for host staging buffers).
#include <cstring>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void fill(Tensor y, float value) {
  RT_CHECK(y.device.is_cpu(), "fill: y is on " << y.device.str() << ", expected a host tensor");
  const int64_t n = y.numel();
  if (n == 0) return;
  RT_CHECK(y.defined(), "fill: y is not defined (null data)");
  if (y.dtype == DType::f32) {
    float* p = y.ptr<float>();  // (numel)
    for (int64_t i = 0; i < n; ++i) p[i] = value;
  } else if (y.dtype == DType::bf16) {
    uint16_t* p = y.ptr<uint16_t>();  // (numel)
    const uint16_t b = float_to_bf16(value);
    for (int64_t i = 0; i < n; ++i) p[i] = b;
  } else {
    RT_CHECK(false, "fill: y has dtype " << dtype_name(y.dtype) << ", expected f32 or bf16");
  }
}

}  // namespace cpu
}  // namespace rt
