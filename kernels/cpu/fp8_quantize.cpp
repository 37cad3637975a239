// fp8_quantize on the host: x (R,K) f32 -> q (R,K) and / or qt (K,R) e4m3 with their factors, by the rounding
// of kernels/fp8.h (the reference the CUDA quantizer matches bit for bit). Block amaxes are taken here; tensor and
// row amaxes come from fp8_amax (kernels/op_list.inc).
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {
namespace {

// The factor grid of one operand (rows x cols of the operand, not of x), filled from amaxes.
struct Quantizer {
  Fp8Scaling scaling;
  int64_t rows, cols;
  std::vector<float> s;  // the multiplier of each scale-tensor entry
  float mult(int64_t r, int64_t c) const { return s[size_t(fp8_scale_index(scaling, rows, cols, r, c))]; }
};

// The amax of every group of operand `o` (rows x cols) whose element (r, c) is at(r, c); tensor / row amaxes are
// given. Returns the multipliers and writes the factors to scale.
template <class At>
Quantizer make_quantizer(Fp8Scaling scaling, int64_t rows, int64_t cols, At at, const Tensor& given_amax,
                         const Tensor& scale, const char* op, const char* arg) {
  Quantizer qz{scaling, rows, cols, {}};
  const Fp8ScaleShape shape = fp8_scale_shape(scaling, rows, cols);
  std::vector<float> amax(size_t(shape.numel()), 0.f);
  if (scaling == Fp8Scaling::tensor || scaling == Fp8Scaling::row) {
    const int64_t n = scaling == Fp8Scaling::tensor ? 1 : rows;
    RT_CHECK(given_amax.defined(), op << ": " << fp8_scaling_name(scaling) << " scaling of " << arg
                                      << " needs its amax from fp8_amax (" << n << " f32); pass it");
    require_cpu_f32(given_amax, op, "amax");
    check_shape(given_amax, {n}, op, scaling == Fp8Scaling::tensor ? "amax (1)" : "amax (rows of the operand)");
    for (int64_t i = 0; i < n; ++i) amax[size_t(i)] = given_amax.ptr<float>()[i];
  } else {
    RT_CHECK(!given_amax.defined(), op << ": block scalings take their amax in the pass; pass amax undefined");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float& m = amax[size_t(fp8_scale_index(scaling, rows, cols, r, c))];
        m = fp8_amax_join(m, at(r, c));
      }
  }
  qz.s.resize(amax.size());
  float* f = scale.ptr<float>();  // fp8_scale_shape(scaling, rows, cols)
  for (size_t i = 0; i < amax.size(); ++i) {
    qz.s[i] = fp8_scale_from_amax(amax[i]);
    f[i] = fp8_factor_from_scale(qz.s[i]);
  }
  if (scaling == Fp8Scaling::block_128x128)  // the padding columns: factor 1 (never read by a GEMM)
    for (int64_t rb = 0; rb < shape.d0; ++rb)
      for (int64_t kb = (cols + 127) / 128; kb < shape.d1; ++kb) f[rb * shape.d1 + kb] = 1.f;
  return qz;
}

}  // namespace

void fp8_quantize(const Fp8Operand& q, const Fp8Operand& qt, const Tensor& x, const Tensor& amax,
                  const Tensor& amax_t) {
  const char* op = "fp8_quantize";
  require_cpu_f32(x, op, "x");
  RT_CHECK(x.ndim == 2, op << ": x is " << x.shape_str() << ", expected (R,K)");
  RT_CHECK(q.defined() || qt.defined(), op << ": neither q nor qt is defined; nothing to do");
  RT_CHECK(!(q.defined() && qt.defined()) || q.scaling == qt.scaling,
           op << ": q is scaled " << fp8_scaling_name(q.scaling) << " but qt " << fp8_scaling_name(qt.scaling)
              << "; one call quantizes with one scaling");
  const int64_t R = x.shape[0], K = x.shape[1];
  const float* xp = x.ptr<float>();  // (R,K)
  if (q.defined()) {
    check_fp8_operand(q, R, K, x.device, op, "q");
    const Quantizer qz = make_quantizer(
        q.scaling, R, K, [&](int64_t r, int64_t c) { return xp[r * K + c]; }, amax, q.scale, op, "q");
    uint8_t* d = q.data.ptr<uint8_t>();  // (R,K)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < K; ++c) d[r * K + c] = float_to_e4m3(xp[r * K + c] * qz.mult(r, c));
  }
  if (qt.defined()) {
    check_fp8_operand(qt, K, R, x.device, op, "qt");
    const Tensor& given = qt.scaling == Fp8Scaling::tensor ? amax : amax_t;
    const Quantizer qz = make_quantizer(
        qt.scaling, K, R, [&](int64_t r, int64_t c) { return xp[c * K + r]; }, given, qt.scale, op, "qt");
    uint8_t* d = qt.data.ptr<uint8_t>();  // (K,R)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t r = 0; r < R; ++r) d[k * R + r] = float_to_e4m3(xp[r * K + k] * qz.mult(k, r));
  }
}

}  // namespace cpu
}  // namespace rt
