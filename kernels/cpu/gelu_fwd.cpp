// gelu_fwd on the host, tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void gelu_fwd(Tensor out, const Tensor& x) {
  require_cpu_f32(out, "gelu_fwd", "out");
  require_cpu_f32(x, "gelu_fwd", "x");
  require_same_numel(out, x, "gelu_fwd", "out", "x");
  const float* px = x.ptr<float>();  // (N,F)
  float* po = out.ptr<float>();      // (N,F)
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  const int64_t n = x.numel();
  for (int64_t e = 0; e < n; ++e) {
    const float v = px[e];
    po[e] = 0.5f * v * (1.f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
}

}  // namespace cpu
}  // namespace rt
