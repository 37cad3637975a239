// gemm_fp8_gelu and gemm_fp8_dgelu on CUDA (kernels/op_list.inc): the FP8 GELU MLP's first GEMM with its GELU and
// the data gradient through the second GEMM and the GELU.
//   gemm_fp8_gelu: one cuBLASLt call with the GELU_AUX epilogue where cuBLASLt has an algorithm (tensorwise operands
//     on the H200; rowwise and block have none), its AMAX_D where offered (cuBLASLt 13.0 offers none with a bf16 D),
//     else fp8_amax; without the epilogue gemm_fp8 + the GELU kernel.
//   gemm_fp8_dgelu: gemm_fp8, then one pass that applies gelu' in place and takes the amax (dgelu_amax_kernel). The
//     FP8 DGELU epilogue runs but is slow: 1.69 ms against 0.94 ms for gemm_fp8 + gelu_bwd at m 16K, F 8192 on the
//     H200 (bench/NOTES.md), so it is not used.
// The first fallback of each kind is printed once.
#include <cstdio>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/gemm_fp8_epilogue.h"

namespace rt {
namespace cuda {
#include "kernels/backend_ops.h"  // cuda::gemm_fp8, cuda::gelu_*, cuda::fp8_amax: inside this op's profiling scope

namespace {

// One line per process, op and kind the first time a fallback runs, so a benchmark log says which path it timed.
void note_once(bool& noted, const char* op, const char* what, int64_t m, int64_t F) {
  if (noted) return;
  noted = true;
  std::fprintf(stderr, "%s: %s (first at m=%lld, F=%lld)\n", op, what, (long long)m, (long long)F);
}

float* amax_ptr(const Tensor& amax, const Tensor& like, const char* op) {
  if (!amax.defined()) return nullptr;
  require_dtype_on(amax, DType::f32, like.device, op, "amax");
  check_shape(amax, {1}, op, "amax (1)");
  return static_cast<float*>(amax.data);
}

// dpre (n) bf16 *= gelu'(pre (n) bf16), in place, 8 elements per 16-byte word; amax (1) as a key (fp8_common.cuh)
// of the result, NaN propagating (amax null: not taken). The derivative is gelu_bwd's (kernels/cuda/gelu_bwd.cu).
__global__ void dgelu_amax_kernel(uint4* __restrict__ dpre, const uint4* __restrict__ pre, int64_t words,
                                  uint32_t* __restrict__ amax) {
  uint32_t key = 0;
  RT_GRID_STRIDE(i, words) {
    uint4 d = dpre[i];
    const uint4 p = __ldg(pre + i);
    uint32_t* dw = reinterpret_cast<uint32_t*>(&d);
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(&p);
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      float out[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = __uint_as_float(e == 0 ? pw[h] << 16 : pw[h] & 0xFFFF0000u);
        const float g = __uint_as_float(e == 0 ? dw[h] << 16 : dw[h] & 0xFFFF0000u);
        const float k = 0.7978845608028654f;
        const float t = tanhf(k * (v + 0.044715f * v * v * v));
        const float dv = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * v * v);
        out[e] = g * dv;
      }
      const __nv_bfloat162 b = __floats2bfloat162_rn(out[0], out[1]);  // .x low half
      dw[h] = *reinterpret_cast<const uint32_t*>(&b);
      key = max(key, max(amax_key(__uint_as_float(dw[h] << 16)), amax_key(__uint_as_float(dw[h] & 0xFFFF0000u))));
    }
    dpre[i] = d;
  }
  key = warp_max_key(key);
  if (amax != nullptr && (threadIdx.x & 31) == 0 && key != 0) atomicMax(amax, key);
}

// out (n) bf16 = gelu(pre (n) bf16), 8 elements per 16-byte word; amax (1) as a key of out, or null. gelu_fwd's
// tanh form (kernels/cuda/gelu_fwd.cu).
__global__ void gelu_amax_kernel(uint4* __restrict__ out, const uint4* __restrict__ pre, int64_t words,
                                 uint32_t* __restrict__ amax) {
  uint32_t key = 0;
  RT_GRID_STRIDE(i, words) {
    const uint4 p = __ldg(pre + i);
    uint4 o;
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(&p);
    uint32_t* ow = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      float r[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = __uint_as_float(e == 0 ? pw[h] << 16 : pw[h] & 0xFFFF0000u);
        r[e] = 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
      }
      const __nv_bfloat162 b = __floats2bfloat162_rn(r[0], r[1]);
      ow[h] = *reinterpret_cast<const uint32_t*>(&b);
      key = max(key, max(amax_key(__uint_as_float(ow[h] << 16)), amax_key(__uint_as_float(ow[h] & 0xFFFF0000u))));
    }
    out[i] = o;
  }
  key = warp_max_key(key);
  if (amax != nullptr && (threadIdx.x & 31) == 0 && key != 0) atomicMax(amax, key);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

const char* kNoEpilogue = "no cuBLASLt FP8 algorithm with the epilogue (or F % 8 != 0, or RT_GEMM_EPILOGUES); "
                          "running gemm_fp8 + the GELU kernel";
const char* kNoAmax = "cuBLASLt offers no amax of D with the epilogue; taking it with fp8_amax";

}  // namespace

void gemm_fp8_gelu(Tensor out, Tensor pre, Tensor amax, const Fp8Operand& x, const Fp8Operand& w) {
  const char* op = "gemm_fp8_gelu";
  require_same_numel(out, pre, op, "out", "pre");
  RT_CHECK(out.dtype == pre.dtype, op << ": out is " << dtype_name(out.dtype) << " but pre is "
                                      << dtype_name(pre.dtype) << "; give both the activation dtype");
  float* a = amax_ptr(amax, out, op);
  bool taken = false;
  static bool noted_epilogue = false, noted_amax = false;
  if (!gemm_fp8_with_epilogue(out, x, w, /*fast_accum=*/true, GemmEpilogue::gelu_aux, pre, a, taken)) {
    note_once(noted_epilogue, op, kNoEpilogue, leading_rows(pre), last_dim(pre));
    cuda::gemm_fp8(pre, x, w, 0.f, true);  // (m,F) = x (m,C) . w (F,C)^T
    const int64_t n = out.numel();
    if (out.dtype == DType::bf16 && n % 8 == 0 && aligned16(out.data) && aligned16(pre.data) && n > 0) {
      cudaStream_t stream = stream_for(out, op);
      if (a != nullptr) CUDA_CHECK(cudaMemsetAsync(a, 0, 4, stream));
      gelu_amax_kernel<<<grid_for(n / 8), kThreads, 0, stream>>>(static_cast<uint4*>(out.data),
                                                               static_cast<const uint4*>(pre.data), n / 8,
                                                               reinterpret_cast<uint32_t*>(a));
      CUDA_CHECK_LAUNCH();
      return;
    }
    cuda::gelu_fwd(out, pre);  // (m,F)
  } else if (a != nullptr && !taken) {
    note_once(noted_amax, op, kNoAmax, leading_rows(pre), last_dim(pre));
  }
  if (a != nullptr && !taken) cuda::fp8_amax(amax, Tensor{}, out, Fp8Scaling::tensor);
}

void gemm_fp8_dgelu(Tensor dpre, Tensor amax, const Fp8Operand& dy, const Fp8Operand& wt, const Tensor& pre) {
  const char* op = "gemm_fp8_dgelu";
  cudaStream_t stream = stream_for(dpre, op);
  require_same_numel(dpre, pre, op, "dpre", "pre");
  RT_CHECK(dpre.data != pre.data, op << ": dpre and pre must be different buffers");
  RT_CHECK(dpre.dtype == pre.dtype, op << ": dpre is " << dtype_name(dpre.dtype) << " but pre is "
                                       << dtype_name(pre.dtype) << "; give both the activation dtype");
  float* a = amax_ptr(amax, dpre, op);
  cuda::gemm_fp8(dpre, dy, wt, 0.f, false);  // (m,F) = dy (m,C) . wt (F,C)^T
  const int64_t n = dpre.numel();
  if (dpre.dtype == DType::bf16 && n % 8 == 0 && aligned16(dpre.data) && aligned16(pre.data) && n > 0) {
    uint32_t* key = reinterpret_cast<uint32_t*>(a);
    if (key != nullptr) CUDA_CHECK(cudaMemsetAsync(key, 0, 4, stream));
    const int64_t words = n / 8;
    dgelu_amax_kernel<<<grid_for(words), kThreads, 0, stream>>>(static_cast<uint4*>(dpre.data),
                                                                static_cast<const uint4*>(pre.data), words,
                                                                key);
    CUDA_CHECK_LAUNCH();
    return;
  }
  cuda::gelu_bwd(dpre, dpre, pre);  // (m,F), elementwise in place
  if (a != nullptr) cuda::fp8_amax(amax, Tensor{}, dpre, Fp8Scaling::tensor);
}

}  // namespace cuda
}  // namespace rt
