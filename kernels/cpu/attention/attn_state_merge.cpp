// attn_state_merge on the host: state = merge(state, other), row by row, in the log2 domain of the state's m:
//   m' = max(m, m_o),  l' = l 2^(m - m') + l_o 2^(m_o - m'),  acc' = acc 2^(m - m') + acc_o 2^(m_o - m').
// A row whose m is -inf has seen no key and contributes nothing (its acc is not read).
#include <cmath>

#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {

void attn_state_merge(AttnState& state, const AttnState& other) {
  const char* op = "attn_state_merge";
  for (const Tensor* t : {&state.acc, &state.m, &state.l}) require_cpu_f32(*t, op, "state");
  for (const Tensor* t : {&other.acc, &other.m, &other.l}) require_cpu_f32(*t, op, "other");
  RT_CHECK(state.acc.ndim == 4, op << ": state.acc has shape " << state.acc.shape_str() << ", expected (B,H,Nq,D)");
  const int64_t B = state.acc.shape[0], H = state.acc.shape[1], Nq = state.acc.shape[2], D = state.acc.shape[3];
  check_shape(state.m, {B, H, Nq}, op, "state.m (B,H,Nq)");
  check_shape(state.l, {B, H, Nq}, op, "state.l (B,H,Nq)");
  check_shape(other.acc, {B, H, Nq, D}, op, "other.acc (B,H,Nq,D)");
  check_shape(other.m, {B, H, Nq}, op, "other.m (B,H,Nq)");
  check_shape(other.l, {B, H, Nq}, op, "other.l (B,H,Nq)");
  float* acc = state.acc.ptr<float>();                // (B*H*Nq, D)
  float* m = state.m.ptr<float>();                    // (B*H*Nq)
  float* l = state.l.ptr<float>();                    // (B*H*Nq)
  const float* acc_o = other.acc.ptr<float>();        // (B*H*Nq, D)
  const float* m_o = other.m.ptr<float>();            // (B*H*Nq)
  const float* l_o = other.l.ptr<float>();            // (B*H*Nq)
  for (int64_t r = 0; r < B * H * Nq; ++r) {
    if (m_o[r] == -INFINITY) continue;  // other saw nothing
    float* a = acc + r * D;              // (D)
    const float* ao = acc_o + r * D;     // (D)
    if (m[r] == -INFINITY) {             // this saw nothing: take other's row
      for (int64_t e = 0; e < D; ++e) a[e] = ao[e];
      m[r] = m_o[r], l[r] = l_o[r];
      continue;
    }
    const float mx = std::max(m[r], m_o[r]);
    const float c = std::exp2(m[r] - mx), co = std::exp2(m_o[r] - mx);
    for (int64_t e = 0; e < D; ++e) a[e] = a[e] * c + ao[e] * co;
    l[r] = l[r] * c + l_o[r] * co;
    m[r] = mx;
  }
}

}  // namespace cpu
}  // namespace rt
