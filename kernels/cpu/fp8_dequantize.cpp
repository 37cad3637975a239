// fp8_dequantize on the host: out (f32) = e4m3_value(q) * the tensorwise factor of amax (kernels/op_list.inc), the
// inverse of fp8_quantize's tensor scaling by the rounding of kernels/fp8.h.
#include <cmath>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void fp8_dequantize(Tensor out, const Tensor& q, const Tensor& amax) {
  const char* op = "fp8_dequantize";
  require_cpu_f32(out, op, "out");
  require_cpu_f32(amax, op, "amax");
  check_shape(amax, {1}, op, "amax (1)");
  RT_CHECK(q.defined() || q.numel() == 0, op << ": q is not defined (null data)");
  RT_CHECK(q.device.is_cpu(), op << ": q is on " << q.device.str() << ", expected a host tensor");
  check_dtype(q, DType::e4m3, op, "q");
  RT_CHECK(out.numel() == q.numel(), op << ": out " << out.shape_str() << " and q " << q.shape_str()
                                        << " must have the same number of elements");
  const float factor = fp8_factor_from_scale(fp8_scale_from_amax(amax.ptr<float>()[0]));  // NaN for a NaN amax
  float table[256];  // every code's value times the factor: the product is the same f32 rounding as per element
  for (int b = 0; b < 256; ++b) table[b] = e4m3_to_float(uint8_t(b)) * factor;
  const uint8_t* qp = q.ptr<uint8_t>();  // (n)
  float* o = out.ptr<float>();           // (n)
  const int64_t n = q.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = table[qp[i]];
}

}  // namespace cpu
}  // namespace rt
