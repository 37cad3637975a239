// sum_squares: sum of x^2 accumulated in fp64. f32 (and bf16 for host copies).
// sum_squares_accumulate adds it to an f32 scalar (the device form of grad clipping; see ops.h).
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

double sum_squares(const Tensor& x) {
  RT_CHECK(x.device.is_cpu(), "sum_squares: x is on " << x.device.str() << ", expected a host tensor");
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  RT_CHECK(x.defined(), "sum_squares: x is not defined (null data)");
  // Four partial sums: independent chains let the loop pipeline.
  double s[4] = {0, 0, 0, 0};
  if (x.dtype == DType::f32) {
    const float* p = x.ptr<float>();  // (numel)
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int u = 0; u < 4; ++u) s[u] += double(p[i + u]) * double(p[i + u]);
    for (; i < n; ++i) s[0] += double(p[i]) * double(p[i]);
  } else if (x.dtype == DType::bf16) {
    const uint16_t* p = x.ptr<uint16_t>();  // (numel)
    for (int64_t i = 0; i < n; ++i) {
      const double v = bf16_to_float(p[i]);
      s[i & 3] += v * v;
    }
  } else {
    RT_CHECK(false, "sum_squares: x has dtype " << dtype_name(x.dtype) << ", expected f32 or bf16");
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

void sum_squares_accumulate(const Tensor& x, Tensor acc) {
  const char* op = "sum_squares_accumulate";
  require_cpu_f32(acc, op, "acc");
  RT_CHECK(acc.numel() == 1, op << ": acc " << acc.shape_str() << " must be one f32 scalar");
  float* a = acc.ptr<float>();  // (1)
  a[0] = float(double(a[0]) + cpu::sum_squares(x));
}

}  // namespace cpu
}  // namespace rt
