// add_rmsnorm_fwd on the host: residual (N,C) += x, then out = rmsnorm(residual), rstd (N).
// Defined as the two ops it fuses, in order, so the CPU path is bit for bit the unfused one (the model's CPU
// reference tests rely on that); the fusion saves memory traffic only on the GPU.
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void add_rmsnorm_fwd(Tensor residual, const Tensor& x, Tensor out, Tensor rstd, const Tensor& weight, float eps) {
  const char* op = "add_rmsnorm_fwd";
  require_cpu_f32(residual, op, "residual");
  require_cpu_f32(x, op, "x");
  require_same_numel(residual, x, op, "residual", "x");
  cpu::add_inplace(residual, x);                      // (N,C)
  cpu::rmsnorm_fwd(out, rstd, residual, weight, eps);  // (N,C), (N)
}

}  // namespace cpu
}  // namespace rt
