// add_inplace: y += x, same shape, f32.
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void add_inplace(Tensor y, const Tensor& x) {
  require_cpu_f32(y, "add_inplace", "y");
  require_cpu_f32(x, "add_inplace", "x");
  require_same_numel(y, x, "add_inplace", "y", "x");
  float* py = y.ptr<float>();        // (numel)
  const float* px = x.ptr<float>();  // (numel)
  const int64_t n = y.numel();
  for (int64_t i = 0; i < n; ++i) py[i] += px[i];
}

}  // namespace cpu
}  // namespace rt
