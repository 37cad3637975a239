// grad_clip_scale on the host: scale = max_norm / (norm + 1e-6) when max_norm > 0 and norm > max_norm, else 1,
// with norm = sqrt(sumsq) in fp64 (the same formula as kernels/cuda/grad_clip_scale.cu); NaN for a non-finite
// norm, counted in scale[1] when scale has two elements.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {

void grad_clip_scale(const Tensor& sumsq, Tensor scale, float max_norm) {
  const char* op = "grad_clip_scale";
  require_cpu_f32(sumsq, op, "sumsq");
  require_cpu_f32(scale, op, "scale");
  RT_CHECK(sumsq.numel() == 1 && (scale.numel() == 1 || scale.numel() == 2),
           op << ": sumsq " << sumsq.shape_str() << " must be one f32 scalar and scale " << scale.shape_str()
              << " one or two (factor, skipped-step count)");
  const double norm = std::sqrt(double(sumsq.ptr<float>()[0]));
  float* out = scale.ptr<float>();
  if (!std::isfinite(norm)) {
    out[0] = std::numeric_limits<float>::quiet_NaN();
    if (scale.numel() == 2) out[1] += 1.f;
    return;
  }
  out[0] = (max_norm > 0.f && norm > double(max_norm)) ? float(double(max_norm) / (norm + 1e-6)) : 1.f;
}

}  // namespace cpu
}  // namespace rt
