// scale_inplace: y *= s, f32.
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void scale_inplace(Tensor y, float s) {
  require_cpu_f32(y, "scale_inplace", "y");
  float* p = y.ptr<float>();  // (numel)
  const int64_t n = y.numel();
  for (int64_t i = 0; i < n; ++i) p[i] *= s;
}

}  // namespace cpu
}  // namespace rt
