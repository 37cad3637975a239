// rope: x (B,T,H,D) rotated in place; pairs (i, i + D/2) within each head by angle pos * inv_freq[i]
// (frequencies computed on the host in fp64 and passed by value), positions (T) i32 global token indices;
// cos and sin are scaled by freqs.cos_sin_scale; inverse rotates by -angle (the transpose: the backward).
//   x1' = s (x1 cos - x2 sin),  x2' = s (x2 cos + x1 sin)   (the "rotate half" form)
// The angle is formed and reduced modulo 2*pi in fp64, so large positions keep full precision.
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void rope_kernel(FloatPtr x, const int32_t* positions, int64_t n_pairs, int64_t T, int64_t H,
                            int64_t D, const RopeFreqs freqs, float sign) {
  const int64_t half = D / 2;
  RT_GRID_STRIDE(p, n_pairs) {
    const int64_t i = p % half;             // pair index within the head
    const int64_t row = p / half;           // (b*T + t)*H + h
    const int64_t t = (row / H) % T;
    double angle = double(positions[t]) * freqs.inv_freq[i];
    angle = remainder(angle, 6.283185307179586);
    float s, c;
    sincosf(float(angle) * sign, &s, &c);
    s *= freqs.cos_sin_scale;
    c *= freqs.cos_sin_scale;
    const int64_t e1 = row * D + i, e2 = e1 + half;
    const float x1 = x.ld(e1), x2 = x.ld(e2);
    x.st(e1, x1 * c - x2 * s);
    x.st(e2, x2 * c + x1 * s);
  }
}

}  // namespace

void rope(Tensor x, const Tensor& positions, const RopeFreqs& freqs, bool inverse) {
  const char* op = "rope";
  cudaStream_t stream = stream_for(x, op);
  RT_CHECK(x.ndim == 4, op << ": x has shape " << x.shape_str() << ", expected (B,T,H,D)");
  const int64_t T = x.shape[1], H = x.shape[2], D = x.shape[3];
  RT_CHECK(D % 2 == 0, op << ": head dim " << D << " must be even");
  RT_CHECK(freqs.pairs == D / 2 && D / 2 <= kMaxRopePairs,
           op << ": the frequencies cover " << freqs.pairs << " pairs but head dim " << D << " has " << D / 2);
  check_shape(positions, {T}, op, "positions (T)");
  require_dtype_on(positions, DType::i32, x.device, op, "positions");
  const FloatPtr xp = float_arg(x, x.device, op, "x");
  const int64_t n_pairs = x.numel() / 2;
  if (n_pairs == 0) return;
  rope_kernel<<<grid_for(n_pairs), kThreads, 0, stream>>>(xp, positions.ptr<int32_t>(), n_pairs, T, H, D, freqs,
                                                          inverse ? -1.f : 1.f);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
