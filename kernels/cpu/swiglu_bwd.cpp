// swiglu_bwd on the host, dgate and dup overwritten. With s = sigmoid(gate):
//   dgate = dout * up * s * (1 + gate * (1 - s)),   dup = dout * gate * s
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void swiglu_bwd(Tensor dgate, Tensor dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_bwd";
  require_cpu_f32(dgate, op, "dgate");
  require_cpu_f32(dup, op, "dup");
  require_cpu_f32(dout, op, "dout");
  require_cpu_f32(gate, op, "gate");
  require_cpu_f32(up, op, "up");
  require_same_numel(dgate, gate, op, "dgate", "gate");
  require_same_numel(dup, gate, op, "dup", "gate");
  require_same_numel(dout, gate, op, "dout", "gate");
  require_same_numel(up, gate, op, "up", "gate");
  const float* pd = dout.ptr<float>();  // (N,F)
  const float* pg = gate.ptr<float>();  // (N,F)
  const float* pu = up.ptr<float>();    // (N,F)
  float* pdg = dgate.ptr<float>();      // (N,F)
  float* pdu = dup.ptr<float>();        // (N,F)
  const int64_t n = gate.numel();
  for (int64_t e = 0; e < n; ++e) {
    const float g = pg[e];
    const float s = 1.f / (1.f + std::exp(-g));
    pdg[e] = pd[e] * pu[e] * s * (1.f + g * (1.f - s));
    pdu[e] = pd[e] * g * s;
  }
}

}  // namespace cpu
}  // namespace rt
