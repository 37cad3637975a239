// fp8_amax on the host: the per-tensor or per-row / per-column amax of x (R,K) f32 (kernels/op_list.inc).
// NaN-propagating: any NaN in a group gives NaN (std::fmax would drop it).
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {
void fp8_amax(Tensor amax, Tensor amax_t, const Tensor& x, Fp8Scaling scaling) {
  const char* op = "fp8_amax";
  require_cpu_f32(x, op, "x");
  RT_CHECK(x.ndim == 2, op << ": x is " << x.shape_str() << ", expected (R,K)");
  const int64_t R = x.shape[0], K = x.shape[1];
  const float* xp = x.ptr<float>();  // (R,K)
  if (scaling == Fp8Scaling::tensor) {
    RT_CHECK(!amax_t.defined(), op << ": tensor scaling has one amax; pass amax_t undefined");
    require_cpu_f32(amax, op, "amax");
    check_shape(amax, {1}, op, "amax (1)");
    float m = 0.f;
    for (int64_t i = 0; i < R * K; ++i) m = fp8_amax_join(m, xp[i]);
    amax.ptr<float>()[0] = m;
    return;
  }
  RT_CHECK(scaling == Fp8Scaling::row, op << ": " << fp8_scaling_name(scaling)
                                          << " scaling takes its amax inside fp8_quantize; call fp8_amax for tensor "
                                             "or row scaling only");
  if (amax.defined()) {
    require_cpu_f32(amax, op, "amax");
    check_shape(amax, {R}, op, "amax (R)");
    float* out = amax.ptr<float>();  // (R)
    for (int64_t r = 0; r < R; ++r) {
      float m = 0.f;
      for (int64_t k = 0; k < K; ++k) m = fp8_amax_join(m, xp[r * K + k]);
      out[r] = m;
    }
  }
  if (amax_t.defined()) {
    require_cpu_f32(amax_t, op, "amax_t");
    check_shape(amax_t, {K}, op, "amax_t (K)");
    float* out = amax_t.ptr<float>();  // (K)
    for (int64_t k = 0; k < K; ++k) out[k] = 0.f;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t k = 0; k < K; ++k) out[k] = fp8_amax_join(out[k], xp[r * K + k]);
  }
}

}  // namespace cpu
}  // namespace rt
