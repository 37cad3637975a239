// attn_state_reset: acc = 0, m = -inf, l = 0 for every (batch, head, query).
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void attn_state_reset(AttnState& state) {
  require_cpu_f32(state.acc, "attn_state_reset", "state.acc");
  require_cpu_f32(state.m, "attn_state_reset", "state.m");
  require_cpu_f32(state.l, "attn_state_reset", "state.l");
  RT_CHECK(state.acc.ndim == 4, "attn_state_reset: state.acc has shape " << state.acc.shape_str()
                                                                         << ", expected (B,H,Nq,D)");
  const Tensor& acc = state.acc;
  check_shape(state.m, {acc.shape[0], acc.shape[1], acc.shape[2]}, "attn_state_reset", "state.m (B,H,Nq)");
  check_shape(state.l, {acc.shape[0], acc.shape[1], acc.shape[2]}, "attn_state_reset", "state.l (B,H,Nq)");
  cpu::fill(state.acc, 0.f);
  cpu::fill(state.m, -INFINITY);
  cpu::fill(state.l, 0.f);
}

}  // namespace cpu
}  // namespace rt
