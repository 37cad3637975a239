// swiglu_bwd on the host, d_gate_up (N,2F) overwritten in gate_up's layout (per row: d gate | d up). With
// s = sigmoid(gate):   d gate = dout * up * s * (1 + gate * (1 - s)),   d up = dout * gate * s
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void swiglu_bwd(Tensor d_gate_up, const Tensor& dout, const Tensor& gate_up) {
  const char* op = "swiglu_bwd";
  require_cpu_f32(d_gate_up, op, "d_gate_up");
  require_cpu_f32(dout, op, "dout");
  require_cpu_f32(gate_up, op, "gate_up");
  int64_t N = 0, F = 0;
  swiglu_shapes(dout, gate_up, op, "dout", N, F);
  require_same_numel(d_gate_up, gate_up, op, "d_gate_up", "gate_up");
  for (int64_t r = 0; r < N; ++r) {
    const float* pd = dout.ptr<float>() + r * F;         // (F)
    const float* pg = gate_up.ptr<float>() + r * 2 * F;  // (F) gate
    const float* pu = pg + F;                            // (F) up
    float* pdg = d_gate_up.ptr<float>() + r * 2 * F;     // (F) d gate
    float* pdu = pdg + F;                                // (F) d up
    for (int64_t c = 0; c < F; ++c) {
      const float g = pg[c];
      const float s = 1.f / (1.f + std::exp(-g));
      pdg[c] = pd[c] * pu[c] * s * (1.f + g * (1.f - s));
      pdu[c] = pd[c] * g * s;
    }
  }
}

}  // namespace cpu
}  // namespace rt
