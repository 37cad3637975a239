// rmsnorm_fwd on the host: out (N,C) = x * rstd * weight, rstd (N) = rsqrt(mean(x^2) + eps).
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& weight, float eps) {
  const char* op = "rmsnorm_fwd";
  require_cpu_f32(out, op, "out");
  require_cpu_f32(rstd, op, "rstd");
  require_cpu_f32(x, op, "x");
  require_cpu_f32(weight, op, "weight");
  RT_CHECK(x.ndim == 2, op << ": x has shape " << x.shape_str() << ", expected (N,C)");
  const int64_t N = x.shape[0], C = x.shape[1];
  check_shape(out, {N, C}, op, "out (N,C)");
  check_shape(rstd, {N}, op, "rstd (N)");
  check_shape(weight, {C}, op, "weight (C)");
  const float* px = x.ptr<float>();       // (N,C)
  const float* pw = weight.ptr<float>();  // (C)
  float* po = out.ptr<float>();           // (N,C)
  float* pr = rstd.ptr<float>();          // (N)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = px + n * C;
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += double(xr[c]) * double(xr[c]);
    const float r = float(1.0 / std::sqrt(ss / double(C) + double(eps)));
    pr[n] = r;
    float* orow = po + n * C;
    for (int64_t c = 0; c < C; ++c) orow[c] = xr[c] * r * pw[c];
  }
}

}  // namespace cpu
}  // namespace rt
