// gemm_fp8_gelu and gemm_fp8_dgelu on the host (kernels/op_list.inc): the unfused calls, so a CPU rank runs the
// same algorithm as the GPU's fallback (gemm_fp8, then the GELU, then the amax of what it wrote).
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void gemm_fp8_gelu(Tensor out, Tensor pre, Tensor amax, const Fp8Operand& x, const Fp8Operand& w) {
  const char* op = "gemm_fp8_gelu";
  require_cpu_f32(out, op, "out");
  require_cpu_f32(pre, op, "pre");
  require_same_numel(out, pre, op, "out", "pre");
  cpu::gemm_fp8(pre, x, w, 0.f, true);  // (m,F) = x (m,C) . w (F,C)^T
  cpu::gelu_fwd(out, pre);              // (m,F)
  if (amax.defined()) cpu::fp8_amax(amax, Tensor{}, out, Fp8Scaling::tensor);  // (1)
}

void gemm_fp8_dgelu(Tensor dpre, Tensor amax, const Fp8Operand& dy, const Fp8Operand& wt, const Tensor& pre) {
  const char* op = "gemm_fp8_dgelu";
  require_cpu_f32(dpre, op, "dpre");
  require_cpu_f32(pre, op, "pre");
  require_same_numel(dpre, pre, op, "dpre", "pre");
  RT_CHECK(dpre.data != pre.data, op << ": dpre and pre must be different buffers");
  cpu::gemm_fp8(dpre, dy, wt, 0.f, false);  // (m,F) = dy (m,C) . wt (F,C)^T
  cpu::gelu_bwd(dpre, dpre, pre);           // (m,F), elementwise in place
  if (amax.defined()) cpu::fp8_amax(amax, Tensor{}, dpre, Fp8Scaling::tensor);  // (1)
}

}  // namespace cpu
}  // namespace rt
