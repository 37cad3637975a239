// adamw on f32 masters: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   p -= lr * wd * p  (decoupled weight decay);  p -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
// with bias corrections bc1 = 1 - b1^step, bc2 = 1 - b2^step. param_lowp (bf16), when defined, receives
// the updated weights (the compute copy). grad_scale (1) f32, when defined, multiplies g on the device
// (the clip factor from grad_clip_scale), so the host never needs the norm; a non-finite one skips the update.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, __nv_bfloat16* p_lowp, int64_t n,
                             float lr, float b1, float b2, float eps, float wd, float bc1, float bc2,
                             const float* grad_scale) {
  const float gs = grad_scale ? *grad_scale : 1.f;
  if (!isfinite(gs)) return;  // the divergence guard: a non-finite norm skips the step
  RT_GRID_STRIDE(i, n) {
    const float gi = grad_scale ? g[i] * gs : g[i];
    const float mi = b1 * m[i] + (1.f - b1) * gi;
    const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float pi = p[i];
    pi -= lr * wd * pi;
    pi -= lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    p[i] = pi;
    if (p_lowp) p_lowp[i] = __float2bfloat16(pi);
  }
}

}  // namespace

void adamw(Tensor param, const Tensor& grad, Tensor m, Tensor v, const AdamWArgs& args, Tensor param_lowp,
           const Tensor& grad_scale) {
  const char* op = "adamw";
  cudaStream_t stream = stream_for(param, op);
  const Device& dev = param.device;
  require_dtype_on(param, DType::f32, dev, op, "param");
  require_dtype_on(grad, DType::f32, dev, op, "grad");
  require_dtype_on(m, DType::f32, dev, op, "m");
  require_dtype_on(v, DType::f32, dev, op, "v");
  require_same_numel(grad, param, op, "grad", "param");
  require_same_numel(m, param, op, "m", "param");
  require_same_numel(v, param, op, "v", "param");
  __nv_bfloat16* lowp = nullptr;
  if (param_lowp.defined()) {
    require_dtype_on(param_lowp, DType::bf16, dev, op, "param_lowp");
    require_same_numel(param_lowp, param, op, "param_lowp", "param");
    lowp = param_lowp.ptr<__nv_bfloat16>();
  }
  const float* scale = nullptr;
  if (grad_scale.defined()) {
    require_dtype_on(grad_scale, DType::f32, dev, op, "grad_scale");
    RT_CHECK(grad_scale.numel() == 1, op << ": grad_scale " << grad_scale.shape_str() << " must be one f32 scalar");
    scale = grad_scale.ptr<float>();
  }
  RT_CHECK(args.step >= 1, op << ": step is " << args.step << "; it is 1-based (bias correction)");
  const int64_t n = param.numel();
  if (n == 0) return;
  const float bc1 = float(1.0 - std::pow(double(args.beta1), double(args.step)));
  const float bc2 = float(1.0 - std::pow(double(args.beta2), double(args.step)));
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(param.ptr<float>(), grad.ptr<float>(), m.ptr<float>(),
                                                     v.ptr<float>(), lowp, n, args.lr, args.beta1, args.beta2,
                                                     args.eps, args.weight_decay, bc1, bc2, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
