// attn_fwd_finalize on the host: out (B,Nq,H,D) = acc / l, lse (B,H,Nq) = (m + log2 l) * ln 2.
// A row that saw no visible key (l == 0) gets out = 0 and lse = -inf.
#include <cmath>

#include "kernels/cpu/attention/attention_common.h"

namespace rt {
namespace cpu {

void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse) {
  const char* op = "attn_fwd_finalize";
  require_cpu_f32(state.acc, op, "state.acc");
  require_cpu_f32(state.m, op, "state.m");
  require_cpu_f32(state.l, op, "state.l");
  require_cpu_f32(out, op, "out");
  require_cpu_f32(lse, op, "lse");
  RT_CHECK(state.acc.ndim == 4, op << ": state.acc has shape " << state.acc.shape_str() << ", expected (B,H,Nq,D)");
  const int64_t B = state.acc.shape[0], H = state.acc.shape[1], Nq = state.acc.shape[2], D = state.acc.shape[3];
  check_shape(state.m, {B, H, Nq}, op, "state.m (B,H,Nq)");
  check_shape(state.l, {B, H, Nq}, op, "state.l (B,H,Nq)");
  check_shape(out, {B, Nq, H, D}, op, "out (B,Nq,H,D)");
  check_shape(lse, {B, H, Nq}, op, "lse (B,H,Nq)");
  const float* acc = state.acc.ptr<float>();  // (B,H,Nq,D)
  const float* m = state.m.ptr<float>();      // (B,H,Nq)
  const float* l = state.l.ptr<float>();      // (B,H,Nq)
  float* o = out.ptr<float>();                // (B,Nq,H,D)
  float* ls = lse.ptr<float>();               // (B,H,Nq)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Nq; ++i) {
        const int64_t row = (b * H + h) * Nq + i;
        const float* a = acc + row * D;              // (D)
        float* dst = o + ((b * Nq + i) * H + h) * D;  // (D)
        if (l[row] > 0.f) {
          const float inv = 1.f / l[row];
          for (int64_t e = 0; e < D; ++e) dst[e] = a[e] * inv;
          ls[row] = (m[row] + std::log2(l[row])) * kLn2;
        } else {
          for (int64_t e = 0; e < D; ++e) dst[e] = 0.f;
          ls[row] = -INFINITY;
        }
      }
}

}  // namespace cpu
}  // namespace rt
