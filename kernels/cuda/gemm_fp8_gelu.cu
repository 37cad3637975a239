// gemm_fp8_gelu and gemm_fp8_dgelu on CUDA (kernels/op_list.inc): the FP8 GELU MLP's first GEMM with its GELU and
// the data gradient through the second GEMM and the GELU.
//   gemm_fp8_gelu: one cuBLASLt call with the GELU_AUX epilogue where cuBLASLt has an algorithm (tensorwise operands
//     on the H200; rowwise and block have none), then fp8_amax of out (cuBLASLt 13.0 offers no AMAX_D with a bf16
//     D); without the epilogue gemm_fp8, then one pass that applies the GELU and takes the amax (gelu_pass_kernel).
//   gemm_fp8_dgelu: gemm_fp8, then one pass that applies gelu' in place and takes the amax. The FP8 DGELU epilogue
//     runs but is slow: 1.69 ms against 0.94 ms for gemm_fp8 + gelu_bwd at m 16K, F 8192 on the H200
//     (bench/NOTES.md), so it is not used.
// The first fallback to the epilogue-less forward is printed once.
#include <cstdio>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/gemm_fp8_epilogue.h"

namespace rt {
namespace cuda {
#include "kernels/backend_ops.h"  // cuda::gemm_fp8, cuda::gelu_*, cuda::fp8_amax: inside this op's profiling scope

namespace {

float* amax_ptr(const Tensor& amax, const Tensor& like, const char* op) {
  if (!amax.defined()) return nullptr;
  require_dtype_on(amax, DType::f32, like.device, op, "amax");
  check_shape(amax, {1}, op, "amax (1)");
  return static_cast<float*>(amax.data);
}

// The GELU's tanh form and its derivative, as kernels/cuda/gelu_fwd.cu and gelu_bwd.cu compute them.
__device__ __forceinline__ float gelu_of(float v) {
  return 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}
__device__ __forceinline__ float dgelu_of(float v) {
  const float k = 0.7978845608028654f, t = tanhf(k * (v + 0.044715f * v * v * v));
  return 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * v * v);
}

// One pass over pre (n) bf16, 8 elements per 16-byte word, writing out (n) bf16:
//   kBackward false: out = gelu(pre);
//   kBackward true:  out *= gelu'(pre), in place (out holds the GEMM's dgelu input);
// and the amax (1) of what it wrote as a key (fp8_common.cuh), NaN propagating (amax null: not taken).
template <bool kBackward>
__global__ void gelu_pass_kernel(uint4* __restrict__ out, const uint4* __restrict__ pre, int64_t words,
                                 uint32_t* __restrict__ amax) {
  uint32_t key = 0;
  RT_GRID_STRIDE(i, words) {
    const uint4 p = __ldg(pre + i);
    uint4 o;
    if constexpr (kBackward) o = out[i];
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(&p);
    uint32_t* ow = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      float r[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = __uint_as_float(e == 0 ? pw[h] << 16 : pw[h] & 0xFFFF0000u);
        if constexpr (kBackward) r[e] = __uint_as_float(e == 0 ? ow[h] << 16 : ow[h] & 0xFFFF0000u) * dgelu_of(v);
        else r[e] = gelu_of(v);
      }
      const __nv_bfloat162 b = __floats2bfloat162_rn(r[0], r[1]);  // .x low half
      ow[h] = *reinterpret_cast<const uint32_t*>(&b);
      key = max(key, max(amax_key(__uint_as_float(ow[h] << 16)), amax_key(__uint_as_float(ow[h] & 0xFFFF0000u))));
    }
    out[i] = o;
  }
  key = warp_max_key(key);
  if (amax != nullptr && (threadIdx.x & 31) == 0 && key != 0) atomicMax(amax, key);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The one-pass GELU (or gelu') with its amax where out and pre are 16-byte aligned bf16 of whole words; returns false
// where it does not apply (the caller runs the GELU kernel and fp8_amax).
template <bool kBackward>
bool gelu_pass(Tensor out, const Tensor& pre, float* amax, const char* op) {
  const int64_t n = out.numel();
  if (!(out.dtype == DType::bf16 && n % 8 == 0 && n > 0 && aligned16(out.data) && aligned16(pre.data))) return false;
  cudaStream_t stream = stream_for(out, op);
  if (amax != nullptr) CUDA_CHECK(cudaMemsetAsync(amax, 0, 4, stream));
  gelu_pass_kernel<kBackward><<<grid_for(n / 8), kThreads, 0, stream>>>(
      static_cast<uint4*>(out.data), static_cast<const uint4*>(pre.data), n / 8, reinterpret_cast<uint32_t*>(amax));
  CUDA_CHECK_LAUNCH();
  return true;
}

void check_pair(const Tensor& out, const Tensor& pre, const char* op, const char* out_name) {
  require_same_numel(out, pre, op, out_name, "pre");
  RT_CHECK(out.dtype == pre.dtype, op << ": " << out_name << " is " << dtype_name(out.dtype) << " but pre is "
                                      << dtype_name(pre.dtype) << "; give both the activation dtype");
}

}  // namespace

void gemm_fp8_gelu(Tensor out, Tensor pre, Tensor amax, const Fp8Operand& x, const Fp8Operand& w) {
  const char* op = "gemm_fp8_gelu";
  check_pair(out, pre, op, "out");
  float* a = amax_ptr(amax, out, op);
  if (gemm_fp8_with_epilogue(out, x, w, /*fast_accum=*/true, GemmEpilogue::gelu_aux, pre)) {
    if (a != nullptr) cuda::fp8_amax(amax, Tensor{}, out, Fp8Scaling::tensor);
    return;
  }
  static bool noted = false;
  if (!noted) {
    noted = true;
    std::fprintf(stderr, "%s: no cuBLASLt FP8 algorithm with the GELU epilogue (or F %% 8 != 0, or RT_GEMM_EPILOGUES; "
                 "first at m=%lld, F=%lld); running gemm_fp8 + the GELU pass\n", op, (long long)leading_rows(pre),
                 (long long)last_dim(pre));
  }
  cuda::gemm_fp8(pre, x, w, 0.f, true);  // (m,F) = x (m,C) . w (F,C)^T
  if (gelu_pass<false>(out, pre, a, op)) return;
  cuda::gelu_fwd(out, pre);  // (m,F)
  if (a != nullptr) cuda::fp8_amax(amax, Tensor{}, out, Fp8Scaling::tensor);
}

void gemm_fp8_dgelu(Tensor dpre, Tensor amax, const Fp8Operand& dy, const Fp8Operand& wt, const Tensor& pre) {
  const char* op = "gemm_fp8_dgelu";
  check_pair(dpre, pre, op, "dpre");
  RT_CHECK(dpre.data != pre.data, op << ": dpre and pre must be different buffers");
  float* a = amax_ptr(amax, dpre, op);
  cuda::gemm_fp8(dpre, dy, wt, 0.f, false);  // (m,F) = dy (m,C) . wt (F,C)^T
  if (gelu_pass<true>(dpre, pre, a, op)) return;
  cuda::gelu_bwd(dpre, dpre, pre);  // (m,F), elementwise in place
  if (a != nullptr) cuda::fp8_amax(amax, Tensor{}, dpre, Fp8Scaling::tensor);
}

}  // namespace cuda
}  // namespace rt
