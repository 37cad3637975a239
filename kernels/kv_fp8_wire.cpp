// The K/V E4M3 quantizer and dequantizer (kernels/kv_fp8_wire.h): the checks, the host code CPU tensors run, and the
// dispatch of CUDA tensors to kernels/cuda/kv_fp8_wire.cu.
#include "kernels/kv_fp8_wire.h"

#include <algorithm>

#include "kernels/attn_fp8.h"
#include "kernels/fp8.h"

namespace rt {

#ifdef RINGTRAIN_HAVE_CUDA
namespace cuda {  // kernels/cuda/kv_fp8_wire.cu
void kv_fp8_quantize(Tensor codes, Tensor factors, const Tensor& x);
void kv_fp8_dequantize(Tensor out, const Tensor& codes, const Tensor& factors);
}  // namespace cuda
#endif

namespace {

// The dims (B, n, Hkv, D) of a 4-d f32 / bf16 tensor `x`, and the checks both directions share: codes of the same
// shape in e4m3, factors (B, Hkv, ceil(n/128)) f32, all on x's device.
struct KvDims {
  int64_t B, n, Hkv, D;
};
KvDims check_kv_fp8_args(const Tensor& x, const Tensor& codes, const Tensor& factors, const char* op,
                         const char* x_name) {
  RT_CHECK(x.ndim == 4, op << ": " << x_name << " must be (B, n, Hkv, D), got " << x.shape_str());
  RT_CHECK(x.dtype == DType::f32 || x.dtype == DType::bf16,
           op << ": " << x_name << " has dtype " << dtype_name(x.dtype) << ", expected f32 or bf16");
  const KvDims d{x.size(0), x.size(1), x.size(2), x.size(3)};
  check_shape(codes, {d.B, d.n, d.Hkv, d.D}, op, "codes");
  check_dtype(codes, DType::e4m3, op, "codes");
  check_shape(factors, {d.B, d.Hkv, kv_fp8_row_blocks(d.n)}, op, "factors");
  check_dtype(factors, DType::f32, op, "factors");
  check_same_device(x, codes, op);
  check_same_device(x, factors, op);
  RT_CHECK(x.numel() == 0 || (x.defined() && codes.defined() && factors.defined()),
           op << ": an argument is not defined (null data)");
  return d;
}

// Element i of an f32 or bf16 host tensor, as float.
float load(const Tensor& t, int64_t i) {
  return t.dtype == DType::bf16 ? bf16_to_float(t.ptr<uint16_t>()[i]) : t.ptr<float>()[i];
}
void store(const Tensor& t, int64_t i, float v) {
  if (t.dtype == DType::bf16) t.ptr<uint16_t>()[i] = float_to_bf16(v);
  else t.ptr<float>()[i] = v;
}

}  // namespace

void kv_fp8_quantize(Tensor codes, Tensor factors, const Tensor& x) {
  const char* op = "kv_fp8_quantize";
  const KvDims d = check_kv_fp8_args(x, codes, factors, op, "x");
#ifdef RINGTRAIN_HAVE_CUDA
  if (x.device.is_cuda()) return cuda::kv_fp8_quantize(codes, factors, x);
#endif
  RT_CHECK(x.device.is_cpu(), op << ": " << x.device.str() << " tensors need the CUDA backend (RINGTRAIN_CUDA=ON)");
  const int64_t nb = kv_fp8_row_blocks(d.n), row = d.Hkv * d.D;  // row: elements of one token's K (or V)
  uint8_t* q = codes.ptr<uint8_t>();                                // (B, n, Hkv, D)
  float* f = factors.ptr<float>();                                  // (B, Hkv, nb)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hk = 0; hk < d.Hkv; ++hk)
      for (int64_t rb = 0; rb < nb; ++rb) {
        const int64_t t0 = rb * kKvFp8RowBlock, t1 = std::min(d.n, t0 + kKvFp8RowBlock);
        float amax = 0.f;
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t e = 0; e < d.D; ++e) amax = fp8_amax_join(amax, load(x, (b * d.n + t) * row + hk * d.D + e));
        const float s = fp8_scale_from_amax(amax);
        f[(b * d.Hkv + hk) * nb + rb] = fp8_factor_from_scale(s);
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t e = 0; e < d.D; ++e) {
            const int64_t i = (b * d.n + t) * row + hk * d.D + e;
            q[i] = float_to_e4m3(load(x, i) * s);
          }
      }
}

void kv_fp8_dequantize(Tensor out, const Tensor& codes, const Tensor& factors) {
  const char* op = "kv_fp8_dequantize";
  const KvDims d = check_kv_fp8_args(out, codes, factors, op, "out");
#ifdef RINGTRAIN_HAVE_CUDA
  if (out.device.is_cuda()) return cuda::kv_fp8_dequantize(out, codes, factors);
#endif
  RT_CHECK(out.device.is_cpu(), op << ": " << out.device.str() << " tensors need the CUDA backend (RINGTRAIN_CUDA=ON)");
  const int64_t nb = kv_fp8_row_blocks(d.n);
  const uint8_t* q = codes.ptr<uint8_t>();  // (B, n, Hkv, D)
  const float* f = factors.ptr<float>();    // (B, Hkv, nb)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.n; ++t)
      for (int64_t hk = 0; hk < d.Hkv; ++hk) {
        const float factor = f[(b * d.Hkv + hk) * nb + t / kKvFp8RowBlock];
        const int64_t base = ((b * d.n + t) * d.Hkv + hk) * d.D;
        for (int64_t e = 0; e < d.D; ++e) store(out, base + e, e4m3_value(q[base + e]) * factor);
      }
}

}  // namespace rt
