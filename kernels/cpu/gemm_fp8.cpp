// gemm_fp8 on the host: c (M,N) = dequant(a) (M,K) @ dequant(b)^T + beta * c with the CPU gemm on the dequantized
// values e4m3_value * factor (f32), the same algorithm as the GPU's FP8 GEMM up to f32 summation order
// (kernels/op_list.inc). The tiling rule is checked as on the GPU, so a CPU rank refuses what a GPU rank would.
#include <vector>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {
namespace {
// dst (R,K) f32 = e4m3_value(o.data) * factor, element by element.
void dequantize(const Fp8Operand& o, int64_t R, int64_t K, std::vector<float>& dst) {
  float table[256];
  for (int i = 0; i < 256; ++i) table[i] = e4m3_to_float(uint8_t(i));
  dst.resize(size_t(R * K));
  const uint8_t* q = o.data.ptr<uint8_t>();  // (R,K)
  const float* f = o.scale.ptr<float>();     // fp8_scale_shape(o.scaling, R, K)
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k)
      dst[size_t(r * K + k)] = table[q[r * K + k]] * f[fp8_scale_index(o.scaling, R, K, r, k)];
}
}  // namespace

void gemm_fp8(Tensor c, const Fp8Operand& a, const Fp8Operand& b, float beta, bool fast_accum) {
  (void)fast_accum;  // the host sums in f32 either way
  const char* op = "gemm_fp8";
  require_cpu_f32(c, op, "c");
  RT_CHECK(c.ndim == 2 && a.data.ndim == 2 && b.data.ndim == 2,
           op << ": c " << c.shape_str() << ", a " << a.data.shape_str() << ", b " << b.data.shape_str()
              << " must be 2-D");
  const int64_t M = c.shape[0], N = c.shape[1], K = a.data.shape[1];
  check_fp8_operand(a, M, K, c.device, op, "a");
  check_fp8_operand(b, N, K, c.device, op, "b");
  RT_CHECK(beta == 0.f || beta == 1.f, op << ": beta is " << beta << "; 0 (overwrite) or 1 (accumulate)");
  check_fp8_gemm_tiling(a.scaling, b.scaling, M, N, K, op);
  std::vector<float> da, db;
  dequantize(a, M, K, da);
  dequantize(b, N, K, db);
  cpu::gemm(c, Tensor(da.data(), DType::f32, c.device, {M, K}), Tensor(db.data(), DType::f32, c.device, {N, K}), false,
       true, 1.f, beta);
}

}  // namespace cpu
}  // namespace rt
