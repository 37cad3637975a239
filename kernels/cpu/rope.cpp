// rope on the host: x (B,T,H,D) rotated in place, pairs (i, i + D/2), angle pos * freqs.inv_freq[i], and
// scaled by freqs.cos_sin_scale. Angles, sines and cosines are computed in fp64 (positions reach 10^5+,
// where fp32 angles lose digits). inverse = true rotates by -angle (the transpose: the backward).
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void rope(Tensor x, const Tensor& positions, const RopeFreqs& freqs, bool inverse) {
  const char* op = "rope";
  require_cpu_f32(x, op, "x");
  require_cpu_i32(positions, op, "positions");
  RT_CHECK(x.ndim == 4, op << ": x has shape " << x.shape_str() << ", expected (B,T,H,D)");
  const int64_t B = x.shape[0], T = x.shape[1], H = x.shape[2], D = x.shape[3];
  RT_CHECK(D % 2 == 0, op << ": head dim D=" << D << " must be even (pairs (i, i+D/2) are rotated)");
  RT_CHECK(freqs.pairs == D / 2 && D / 2 <= kMaxRopePairs,
           op << ": the frequencies cover " << freqs.pairs << " pairs but head dim D=" << D << " has " << D / 2
              << " (at most " << kMaxRopePairs << ")");
  check_shape(positions, {T}, op, "positions (T)");
  const int64_t half = D / 2;
  const int32_t* pos = positions.ptr<int32_t>();  // (T)
  float* px = x.ptr<float>();                     // (B,T,H,D)
  thread_local std::vector<double> cs, sn;        // (D/2) each, grow-only scratch
  cs.resize(size_t(half));
  sn.resize(size_t(half));
  const double scale = double(freqs.cos_sin_scale);
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(pos[t]) * freqs.inv_freq[i];
      cs[size_t(i)] = scale * std::cos(angle);
      sn[size_t(i)] = scale * sign * std::sin(angle);
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        float* row = px + ((b * T + t) * H + h) * D;  // (D)
        for (int64_t i = 0; i < half; ++i) {
          const double x1 = row[i], x2 = row[i + half];
          row[i] = float(x1 * cs[size_t(i)] - x2 * sn[size_t(i)]);
          row[i + half] = float(x1 * sn[size_t(i)] + x2 * cs[size_t(i)]);
        }
      }
  }
}

}  // namespace cpu
}  // namespace rt
