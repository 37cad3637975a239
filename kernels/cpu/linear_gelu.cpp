// linear_gelu_fwd and linear_dgelu on the host: a Linear and the GELU (tanh) around it, defined as the unfused
// calls so the CPU path is bit for bit the unfused one (the model's CPU reference tests rely on that).
//   linear_gelu_fwd: pre (m,F) = x (m,C) @ w (F,C)^T; out (m,F) = gelu(pre)
//   linear_dgelu:    dpre (m,F) = (dout (m,C) @ w (C,F)) * gelu'(pre); the product is formed in dpre itself and
//                    gelu_bwd runs in place (it is elementwise), so no (m,F) scratch is needed.
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void linear_gelu_fwd(Tensor out, Tensor pre, const Tensor& x, const Tensor& w) {
  const char* op = "linear_gelu_fwd";
  require_cpu_f32(out, op, "out");
  require_cpu_f32(pre, op, "pre");
  require_same_numel(out, pre, op, "out", "pre");
  cpu::gemm(pre, x, w, false, true, 1.f, 0.f);  // (m,F) = (m,C) @ (F,C)^T
  cpu::gelu_fwd(out, pre);                      // (m,F)
}

void linear_dgelu(Tensor dpre, const Tensor& dout, const Tensor& w, const Tensor& pre) {
  const char* op = "linear_dgelu";
  require_cpu_f32(dpre, op, "dpre");
  require_cpu_f32(pre, op, "pre");
  require_same_numel(dpre, pre, op, "dpre", "pre");
  RT_CHECK(dpre.data != pre.data, op << ": dpre and pre must be different buffers");
  cpu::gemm(dpre, dout, w, false, false, 1.f, 0.f);  // (m,F) = (m,C) @ (C,F)
  cpu::gelu_bwd(dpre, dpre, pre);                    // (m,F), elementwise in place
}

}  // namespace cpu
}  // namespace rt
