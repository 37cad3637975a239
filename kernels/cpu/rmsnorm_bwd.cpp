// rmsnorm_bwd on the host. With g = dout * weight and r = rstd:
//   dx += r * (g - x * r^2 * mean(g * x))      (accumulates: dx is the residual-stream gradient)
//   dweight += sum_n dout * x * r              (f32, accumulates)
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void rmsnorm_bwd(Tensor dx, Tensor dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                 const Tensor& rstd) {
  const char* op = "rmsnorm_bwd";
  require_cpu_f32(dx, op, "dx");
  require_cpu_f32(dweight, op, "dweight");
  require_cpu_f32(dout, op, "dout");
  require_cpu_f32(x, op, "x");
  require_cpu_f32(weight, op, "weight");
  require_cpu_f32(rstd, op, "rstd");
  RT_CHECK(x.ndim == 2, op << ": x has shape " << x.shape_str() << ", expected (N,C)");
  const int64_t N = x.shape[0], C = x.shape[1];
  check_shape(dx, {N, C}, op, "dx (N,C)");
  check_shape(dout, {N, C}, op, "dout (N,C)");
  check_shape(dweight, {C}, op, "dweight (C)");
  check_shape(weight, {C}, op, "weight (C)");
  check_shape(rstd, {N}, op, "rstd (N)");
  const float* px = x.ptr<float>();     // (N,C)
  const float* pg = dout.ptr<float>();  // (N,C)
  const float* pw = weight.ptr<float>();  // (C)
  const float* pr = rstd.ptr<float>();  // (N)
  float* pdx = dx.ptr<float>();         // (N,C)
  float* pdw = dweight.ptr<float>();    // (C)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * C;
    const float* gr = pg + n * C;
    const float r = pr[n];
    double dot = 0;  // sum_c dout * weight * x
    for (int64_t c = 0; c < C; ++c) dot += double(gr[c]) * double(pw[c]) * double(xr[c]);
    const float k = float(dot / double(C)) * r * r;
    float* dxr = pdx + n * C;
    for (int64_t c = 0; c < C; ++c) {
      dxr[c] += r * (gr[c] * pw[c] - xr[c] * k);
      pdw[c] += gr[c] * xr[c] * r;
    }
  }
}

}  // namespace cpu
}  // namespace rt
