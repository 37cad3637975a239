// rope_from_table on the host: x (B,T,H,D) rotated in place by the table cos_sin (T, D/2, 2) f32 of
// (s cos, s sin) per position and pair (kernels/rope_table.h); pairs (i, i + D/2). The products are formed in
// fp64 from the fp32 table entries. inverse = true negates the sine (the transpose: the backward).
#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void rope_from_table(Tensor x, const Tensor& cos_sin, bool inverse) {
  const char* op = "rope_from_table";
  require_cpu_f32(x, op, "x");
  require_cpu_f32(cos_sin, op, "cos_sin");
  RT_CHECK(x.ndim == 4, op << ": x has shape " << x.shape_str() << ", expected (B,T,H,D)");
  const int64_t B = x.shape[0], T = x.shape[1], H = x.shape[2], D = x.shape[3], half = D / 2;
  RT_CHECK(D % 2 == 0, op << ": head dim D=" << D << " must be even (pairs (i, i+D/2) are rotated)");
  check_shape(cos_sin, {T, half, 2}, op, "cos_sin (T, D/2, 2)");
  const float* tab = cos_sin.ptr<float>();  // (T, D/2, 2)
  float* px = x.ptr<float>();               // (B,T,H,D)
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* cs = tab + t * half * 2;  // (D/2, 2)
      for (int64_t h = 0; h < H; ++h) {
        float* row = px + ((b * T + t) * H + h) * D;  // (D)
        for (int64_t i = 0; i < half; ++i) {
          const double c = cs[2 * i], s = sign * double(cs[2 * i + 1]);
          const double x1 = row[i], x2 = row[i + half];
          row[i] = float(x1 * c - x2 * s);
          row[i + half] = float(x1 * s + x2 * c);
        }
      }
    }
}

}  // namespace cpu
}  // namespace rt
