// rope_from_table: x (B,T,H,D) rotated in place by the table cos_sin (T, D/2, 2) f32 of (s cos, s sin) per
// position and pair (built in fp64 on the host, kernels/rope_table.h); pairs (i, i + D/2) within each head:
//   x1' = x1 c - x2 s,  x2' = x2 c + x1 s   (inverse: s -> -s, the backward)
// One block-stride loop over token rows (b, t); a row's H * D/2 pairs are spread over the threads, which read the
// row's D/2 table entries (float2, shared by the H heads through L1). No transcendental math, no 64-bit division
// per element: the op moves x once in and once out (the old per-element fp64 angle ran at ~9x that time).
// bf16 x with D/2 % 8 == 0 and 16-byte aligned rows: each thread rotates 8 consecutive pairs with 16-byte loads
// and stores of x1 and x2 (rope_from_table_vec_kernel); otherwise one pair per thread access.
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

__global__ void rope_from_table_kernel(FloatPtr x, const float2* cos_sin, int64_t rows, int64_t T, int H, int half,
                                       float sign) {
  const int pairs_per_row = H * half;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // r = b*T + t
    const int64_t t = r % T;
    const float2* cs = cos_sin + t * half;  // (D/2) of (c, s)
    const int64_t row_base = r * int64_t(H) * 2 * half;
    for (int j = threadIdx.x; j < pairs_per_row; j += blockDim.x) {
      const int h = j / half, i = j - h * half;
      const float2 e = cs[i];
      const float c = e.x, s = sign * e.y;
      const int64_t e1 = row_base + int64_t(h) * 2 * half + i, e2 = e1 + half;
      const float x1 = x.ld(e1), x2 = x.ld(e2);
      x.st(e1, x1 * c - x2 * s);
      x.st(e2, x2 * c + x1 * s);
    }
  }
}

// 8 pairs (i..i+7, i + D/2..) per thread access; groups = H * half / 8 per row.
__global__ void rope_from_table_vec_kernel(__nv_bfloat16* x, const float2* cos_sin, int64_t rows, int64_t T, int H,
                                           int half, float sign) {
  const int groups_per_head = half / 8, groups = H * groups_per_head;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // r = b*T + t
    const float4* cs = reinterpret_cast<const float4*>(cos_sin + (r % T) * half);  // (D/4) of (c0, s0, c1, s1)
    __nv_bfloat16* row = x + r * int64_t(H) * 2 * half;
    for (int j = threadIdx.x; j < groups; j += blockDim.x) {
      const int h = j / groups_per_head, i = (j - h * groups_per_head) * 8;
      uint4* p1 = reinterpret_cast<uint4*>(row + int64_t(h) * 2 * half + i);
      uint4* p2 = reinterpret_cast<uint4*>(row + int64_t(h) * 2 * half + half + i);
      uint4 a = *p1, b = *p2;
      __nv_bfloat162* ha = reinterpret_cast<__nv_bfloat162*>(&a);
      __nv_bfloat162* hb = reinterpret_cast<__nv_bfloat162*>(&b);
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // pairs i + 2k, i + 2k + 1
        const float4 e = cs[i / 2 + k];
        const float2 x1 = __bfloat1622float2(ha[k]), x2 = __bfloat1622float2(hb[k]);
        const float s0 = sign * e.y, s1 = sign * e.w;
        ha[k] = __floats2bfloat162_rn(x1.x * e.x - x2.x * s0, x1.y * e.z - x2.y * s1);
        hb[k] = __floats2bfloat162_rn(x2.x * e.x + x1.x * s0, x2.y * e.z + x1.y * s1);
      }
      *p1 = a;
      *p2 = b;
    }
  }
}

}  // namespace

void rope_from_table(Tensor x, const Tensor& cos_sin, bool inverse) {
  const char* op = "rope_from_table";
  cudaStream_t stream = stream_for(x, op);
  RT_CHECK(x.ndim == 4, op << ": x has shape " << x.shape_str() << ", expected (B,T,H,D)");
  const int64_t B = x.shape[0], T = x.shape[1], H = x.shape[2], D = x.shape[3];
  RT_CHECK(D % 2 == 0, op << ": head dim " << D << " must be even");
  RT_CHECK(H * D <= int64_t(1) << 30, op << ": " << H << " heads x " << D << " exceed one row's index range");
  check_shape(cos_sin, {T, D / 2, 2}, op, "cos_sin (T, D/2, 2)");
  require_dtype_on(cos_sin, DType::f32, x.device, op, "cos_sin");
  const FloatPtr xp = float_arg(x, x.device, op, "x");
  const int64_t rows = B * T;
  if (rows == 0 || D == 0 || H == 0) return;
  const int64_t cap = int64_t(device_props().multiProcessorCount) * 16;
  const unsigned blocks = unsigned(rows < cap ? rows : cap);
  const bool vec = x.dtype == DType::bf16 && (D / 2) % 8 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(cos_sin.data) % 16 == 0;
  if (vec)
    rope_from_table_vec_kernel<<<blocks, kThreads, 0, stream>>>(x.ptr<__nv_bfloat16>(),
                                                                static_cast<const float2*>(cos_sin.data), rows, T,
                                                                int(H), int(D / 2), inverse ? -1.f : 1.f);
  else
    rope_from_table_kernel<<<blocks, kThreads, 0, stream>>>(xp, static_cast<const float2*>(cos_sin.data), rows, T,
                                                            int(H), int(D / 2), inverse ? -1.f : 1.f);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
