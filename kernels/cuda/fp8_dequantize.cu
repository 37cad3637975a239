// fp8_dequantize on CUDA (kernels/op_list.inc): out (f32 or bf16) = e4m3_value(q) * the tensorwise factor of amax,
// the factor computed on the device from amax as fp8_quantize computes it (fp8_common.cuh), so no host wait. Each
// thread converts 8 codes: one 8-byte load and one 16-byte (bf16) or two 16-byte (f32) stores when n % 8 == 0 and
// both pointers are aligned, else element by element.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fp8_common.cuh"

namespace rt {
namespace cuda {
namespace {

// E4M3 bits -> float, exact (through half, which holds every E4M3 value); 0x7F / 0xFF give NaN.
__device__ __forceinline__ float e4m3_value(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3);
  return __half2float(__half(h));
}

__device__ __forceinline__ float factor_of_amax(const float* amax) { return fp8_factor_of(fp8_scale_of(*amax)); }

template <class T>
__global__ void dequantize_vec_kernel(const uint2* __restrict__ q, T* __restrict__ out, int64_t groups,
                                      const float* __restrict__ amax) {
  // q: groups x 8 codes; out: groups x 8 values.
  const float f = factor_of_amax(amax);
  RT_GRID_STRIDE(g, groups) {
    const uint2 w = __ldg(q + g);
    float v[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = e4m3_value(uint8_t(w.x >> (8 * i))) * f;
      v[4 + i] = e4m3_value(uint8_t(w.y >> (8 * i))) * f;
    }
    if constexpr (sizeof(T) == 2) {
      uint4 o;
      uint32_t* p = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 b = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        p[i] = *reinterpret_cast<const uint32_t*>(&b);
      }
      reinterpret_cast<uint4*>(out)[g] = o;
    } else {
      float4* o = reinterpret_cast<float4*>(out) + 2 * g;
      o[0] = make_float4(v[0], v[1], v[2], v[3]);
      o[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
  }
}

__global__ void dequantize_kernel(const uint8_t* __restrict__ q, FloatPtr out, int64_t n,
                                  const float* __restrict__ amax) {
  // q (n) codes; out (n) values.
  const float f = factor_of_amax(amax);
  RT_GRID_STRIDE(i, n) out.st(i, e4m3_value(q[i]) * f);
}

}  // namespace

void fp8_dequantize(Tensor out, const Tensor& q, const Tensor& amax) {
  const char* op = "fp8_dequantize";
  cudaStream_t stream = stream_for(out, op);
  const FloatPtr o = float_arg(out, out.device, op, "out");
  require_dtype_on(q, DType::e4m3, out.device, op, "q");
  require_dtype_on(amax, DType::f32, out.device, op, "amax");
  check_shape(amax, {1}, op, "amax (1)");
  RT_CHECK(out.numel() == q.numel(), op << ": out " << out.shape_str() << " and q " << q.shape_str()
                                        << " must have the same number of elements");
  const int64_t n = q.numel();
  if (n == 0) return;
  const float* a = static_cast<const float*>(amax.data);
  const bool vec = n % 8 == 0 && reinterpret_cast<uintptr_t>(q.data) % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(out.data) % 16 == 0;
  if (vec) {
    const int64_t groups = n / 8;
    const uint2* qv = static_cast<const uint2*>(q.data);
    if (o.bf16)
      dequantize_vec_kernel<__nv_bfloat16>
          <<<grid_for(groups), kThreads, 0, stream>>>(qv, static_cast<__nv_bfloat16*>(out.data), groups, a);
    else
      dequantize_vec_kernel<float><<<grid_for(groups), kThreads, 0, stream>>>(qv, static_cast<float*>(out.data),
                                                                               groups, a);
  } else {
    dequantize_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const uint8_t*>(q.data), o, n, a);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
