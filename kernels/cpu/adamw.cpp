// adamw on the host: param, grad, m, v f32 of one shape. Decoupled weight decay, bias correction with
// the 1-based step (the form of PyTorch's AdamW):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p = p - lr * (wd * p + (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps))
// param_lowp, when defined on the host (f32 or bf16, same shape), receives a copy of the updated weights.
// grad_scale (1) f32, when defined, multiplies g (the clip factor from grad_clip_scale); a non-finite one skips
// the update (nothing is written).
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWArgs& args, Tensor param_lowp,
           const Tensor& grad_scale) {
  const char* op = "adamw";
  require_cpu_f32(param, op, "param");
  require_cpu_f32(grad, op, "grad");
  require_cpu_f32(m, op, "m");
  require_cpu_f32(v, op, "v");
  require_same_numel(grad, param, op, "grad", "param");
  require_same_numel(m, param, op, "m", "param");
  require_same_numel(v, param, op, "v", "param");
  RT_CHECK(args.step >= 1, op << ": step " << args.step << " must be >= 1 (bias correction is 1-based)");
  const bool lowp = param_lowp.defined();
  if (lowp) {
    RT_CHECK(param_lowp.device.is_cpu(), op << ": param_lowp is on " << param_lowp.device.str()
                                            << ", expected a host tensor");
    RT_CHECK(param_lowp.dtype == DType::f32 || param_lowp.dtype == DType::bf16,
             op << ": param_lowp has dtype " << dtype_name(param_lowp.dtype) << ", expected f32 or bf16");
    RT_CHECK(param_lowp.numel() == param.numel(),
             op << ": param_lowp " << param_lowp.shape_str() << " does not match param " << param.shape_str());
  }
  const bool scaled = grad_scale.defined();
  if (scaled) {
    require_cpu_f32(grad_scale, op, "grad_scale");
    RT_CHECK(grad_scale.numel() == 1, op << ": grad_scale " << grad_scale.shape_str() << " must be one f32 scalar");
  }
  const float gs = scaled ? grad_scale.ptr<float>()[0] : 1.f;
  if (!std::isfinite(gs)) return;  // the divergence guard: a non-finite norm skips the step
  const double bc1 = 1.0 - std::pow(double(args.beta1), double(args.step));
  const double bc2 = 1.0 - std::pow(double(args.beta2), double(args.step));
  const float step_size = float(double(args.lr) / bc1);       // lr / (1 - b1^t)
  const float inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));     // 1 / sqrt(1 - b2^t)
  const float decay = args.lr * args.weight_decay;
  const float b1 = args.beta1, b2 = args.beta2, eps = args.eps;
  float* p = param.ptr<float>();       // (numel)
  const float* g = grad.ptr<float>();  // (numel)
  float* pm = m.ptr<float>();          // (numel)
  float* pv = v.ptr<float>();          // (numel)
  const int64_t n = param.numel();
  for (int64_t e = 0; e < n; ++e) {
    const float ge = scaled ? g[e] * gs : g[e];
    pm[e] = b1 * pm[e] + (1.f - b1) * ge;
    pv[e] = b2 * pv[e] + (1.f - b2) * ge * ge;
    const float denom = std::sqrt(pv[e]) * inv_sqrt_bc2 + eps;
    p[e] = p[e] - decay * p[e] - step_size * pm[e] / denom;
  }
  if (lowp) cpu::copy_cast(param_lowp, param);
}

}  // namespace cpu
}  // namespace rt
