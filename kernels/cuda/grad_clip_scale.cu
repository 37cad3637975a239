// grad_clip_scale: the global-norm clip factor, computed on the device so AdamW reads it without the
// host waiting for the norm: scale = max_norm / (norm + 1e-6) when max_norm > 0 and norm > max_norm, else 1,
// with norm = sqrt(sumsq) in fp64; NaN for a non-finite norm (adamw then skips), counted in scale[1] when
// scale has two elements.
#include <cmath>

#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void grad_clip_scale_kernel(const float* sumsq, float* scale, float max_norm, bool count_skips) {
  const double norm = sqrt(double(sumsq[0]));
  if (!isfinite(norm)) {  // the divergence guard: adamw skips a step whose factor is NaN
    scale[0] = __int_as_float(0x7fc00000);
    if (count_skips) scale[1] += 1.f;
    return;
  }
  scale[0] = (max_norm > 0.f && norm > double(max_norm)) ? float(double(max_norm) / (norm + 1e-6)) : 1.f;
}

}  // namespace

void grad_clip_scale(const Tensor& sumsq, Tensor scale, float max_norm) {
  const char* op = "grad_clip_scale";
  cudaStream_t stream = stream_for(sumsq, op);
  require_dtype_on(sumsq, DType::f32, sumsq.device, op, "sumsq");
  require_dtype_on(scale, DType::f32, sumsq.device, op, "scale");
  RT_CHECK(sumsq.numel() == 1 && (scale.numel() == 1 || scale.numel() == 2),
           op << ": sumsq " << sumsq.shape_str() << " must be one f32 scalar and scale " << scale.shape_str()
              << " one or two (factor, skipped-step count)");
  grad_clip_scale_kernel<<<1, 1, 0, stream>>>(sumsq.ptr<float>(), scale.ptr<float>(), max_norm, scale.numel() == 2);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
