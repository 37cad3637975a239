// swiglu_fwd on the host: out (N,F) = silu(gate) * up, silu(g) = g * sigmoid(g), where row r of gate_up (N,2F)
// holds gate in columns [0, F) and up in [F, 2F) (the fused gate|up Linear's output).
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void swiglu_fwd(Tensor out, const Tensor& gate_up) {
  const char* op = "swiglu_fwd";
  require_cpu_f32(out, op, "out");
  require_cpu_f32(gate_up, op, "gate_up");
  int64_t N = 0, F = 0;
  swiglu_shapes(out, gate_up, op, "out", N, F);
  for (int64_t r = 0; r < N; ++r) {
    const float* pg = gate_up.ptr<float>() + r * 2 * F;  // (F) gate of row r
    const float* pu = pg + F;                            // (F) up of row r
    float* po = out.ptr<float>() + r * F;                // (F)
    for (int64_t c = 0; c < F; ++c) {
      const float g = pg[c];
      po[c] = g / (1.f + std::exp(-g)) * pu[c];
    }
  }
}

}  // namespace cpu
}  // namespace rt
