// gelu_bwd on the host (tanh approximation), dx overwritten:
//   u = sqrt(2/pi) (x + 0.044715 x^3), t = tanh(u)
//   dx = dout * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void gelu_bwd(Tensor dx, const Tensor& dout, const Tensor& x) {
  require_cpu_f32(dx, "gelu_bwd", "dx");
  require_cpu_f32(dout, "gelu_bwd", "dout");
  require_cpu_f32(x, "gelu_bwd", "x");
  require_same_numel(dx, x, "gelu_bwd", "dx", "x");
  require_same_numel(dout, x, "gelu_bwd", "dout", "x");
  const float* px = x.ptr<float>();     // (N,F)
  const float* pg = dout.ptr<float>();  // (N,F)
  float* pd = dx.ptr<float>();          // (N,F)
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  const int64_t n = x.numel();
  for (int64_t e = 0; e < n; ++e) {
    const float v = px[e];
    const float t = std::tanh(k * (v + 0.044715f * v * v * v));
    const float du = k * (1.f + 3.f * 0.044715f * v * v);
    pd[e] = pg[e] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du);
  }
}

}  // namespace cpu
}  // namespace rt
