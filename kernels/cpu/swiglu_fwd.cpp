// swiglu_fwd on the host: out (N,F) = silu(gate) * up, silu(g) = g * sigmoid(g).
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void swiglu_fwd(Tensor out, const Tensor& gate, const Tensor& up) {
  require_cpu_f32(out, "swiglu_fwd", "out");
  require_cpu_f32(gate, "swiglu_fwd", "gate");
  require_cpu_f32(up, "swiglu_fwd", "up");
  require_same_numel(out, gate, "swiglu_fwd", "out", "gate");
  require_same_numel(up, gate, "swiglu_fwd", "up", "gate");
  const float* pg = gate.ptr<float>();  // (N,F)
  const float* pu = up.ptr<float>();    // (N,F)
  float* po = out.ptr<float>();         // (N,F)
  const int64_t n = gate.numel();
  for (int64_t e = 0; e < n; ++e) {
    const float g = pg[e];
    po[e] = g / (1.f + std::exp(-g)) * pu[e];
  }
}

}  // namespace cpu
}  // namespace rt
