// add_rmsnorm_fwd: residual (N,C) += x (N,C); out (N,C) = residual * rsqrt(mean(residual^2) + eps) * weight;
// rstd (N) f32. One block per row. The sum is stored first and the norm is taken of the stored (rounded) values,
// as add_inplace + rmsnorm_fwd would; rows of up to kThreads * kPerThread columns stay in registers between the two
// passes (otherwise the second pass re-reads the row, from L1/L2). Traffic: read residual, x; write residual, out
// (4 row passes instead of the unfused 5).
// Two kernels: where residual, x and out are all bf16 with C % 8 == 0 and 16-byte aligned rows, one warp per row
// with 16-byte vectors (rows up to 2048 columns stay in registers as bf16x8; wider rows re-read the rest of the
// stored sum) and the weight staged in shared memory (add_rmsnorm_fwd_vec_kernel); otherwise one block per row,
// one element per thread access (add_rmsnorm_fwd_kernel). The same arithmetic in the same order.
#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kPerThread = 16;  // register-resident columns per thread: C <= 4096 at 256 threads

// Stores v at p[i] and returns the value as stored (rounded to bf16 where p is bf16), which is what the norm of the
// unfused path reads back.
__device__ __forceinline__ float stored(FloatPtr p, int64_t i, float v) {
  p.st(i, v);
  return p.bf16 ? __bfloat162float(__float2bfloat16(v)) : v;
}

__global__ void add_rmsnorm_fwd_kernel(FloatPtr residual, FloatPtr x, FloatPtr out, float* rstd, FloatPtr weight,
                                       int64_t C, float eps) {
  __shared__ float shared[32];
  const int64_t base = int64_t(blockIdx.x) * C;
  float kept[kPerThread];  // this thread's columns threadIdx.x + k * blockDim.x of the stored sum (registers)
  const int64_t in_regs = int64_t(kPerThread) * blockDim.x;
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    kept[k] = 0.f;
    if (c < C) {
      kept[k] = stored(residual, base + c, residual.ld(base + c) + x.ld(base + c));
      ss += kept[k] * kept[k];
    }
  }
  for (int64_t c = in_regs + threadIdx.x; c < C; c += blockDim.x) {  // wide rows: the rest is re-read below
    const float v = stored(residual, base + c, residual.ld(base + c) + x.ld(base + c));
    ss += v * v;
  }
  ss = block_sum(ss, shared);
  const float r = rsqrtf(ss / float(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    if (c < C) out.st(base + c, kept[k] * r * weight.ld(c));
  }
  for (int64_t c = in_regs + threadIdx.x; c < C; c += blockDim.x)
    out.st(base + c, residual.ld(base + c) * r * weight.ld(c));
}

constexpr int kVecWarps = 4;   // rows at a time per block, one per warp
constexpr int kVecKept = 8;    // chunks of 32 lanes x 8 columns kept in registers per row (2048 columns)

// Adds 8 bf16 of x to 8 of residual in f32, rounds the sums to bf16 (what is stored) and returns them packed;
// f receives the rounded values.
__device__ __forceinline__ uint4 add8_rounded(const uint4& a, const uint4& b, float* f) {
  uint4 r;
  const __nv_bfloat162* ha = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* hb = reinterpret_cast<const __nv_bfloat162*>(&b);
  __nv_bfloat162* hr = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 fa = __bfloat1622float2(ha[k]), fb = __bfloat1622float2(hb[k]);
    hr[k] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
    const float2 fr = __bfloat1622float2(hr[k]);
    f[2 * k] = fr.x, f[2 * k + 1] = fr.y;
  }
  return r;
}

__device__ __forceinline__ uint4 norm8(const uint4& stored, float r, const float* w) {
  uint4 o;
  const __nv_bfloat162* hs = reinterpret_cast<const __nv_bfloat162*>(&stored);
  __nv_bfloat162* ho = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 v = __bfloat1622float2(hs[k]);
    ho[k] = __floats2bfloat162_rn(v.x * r * w[2 * k], v.y * r * w[2 * k + 1]);
  }
  return o;
}

__global__ void __launch_bounds__(kVecWarps * 32)
    add_rmsnorm_fwd_vec_kernel(__nv_bfloat16* residual, const __nv_bfloat16* x, __nv_bfloat16* out, float* rstd,
                               FloatPtr weight, int64_t N, int64_t C, float eps) {
  extern __shared__ float w_s[];  // (C) the weight, f32
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) w_s[c] = weight.ld(c);
  __syncthreads();
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int64_t chunks = (C + 255) / 256;  // 32 lanes x 8 columns each; the last may be partial
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < N; row += int64_t(gridDim.x) * warps) {
    const int64_t base = row * C;
    uint4 a[kVecKept], b[kVecKept];  // this lane's 8 columns of chunk k: residual, then the stored sum; x
#pragma unroll
    for (int k = 0; k < kVecKept; ++k) {
      const int64_t c = k * 256 + lane * 8;
      if (k < chunks && c < C) {
        a[k] = *reinterpret_cast<const uint4*>(residual + base + c);
        b[k] = *reinterpret_cast<const uint4*>(x + base + c);
      }
    }
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < kVecKept; ++k) {
      const int64_t c = k * 256 + lane * 8;
      if (k < chunks && c < C) {
        float f[8];
        a[k] = add8_rounded(a[k], b[k], f);
        *reinterpret_cast<uint4*>(residual + base + c) = a[k];
#pragma unroll
        for (int v = 0; v < 8; ++v) ss += f[v] * f[v];
      }
    }
    for (int64_t k = kVecKept; k < chunks; ++k) {  // wide rows: stored now, re-read below (this lane's own columns)
      const int64_t c = k * 256 + lane * 8;
      if (c < C) {
        float f[8];
        const uint4 sum = add8_rounded(*reinterpret_cast<const uint4*>(residual + base + c),
                                       *reinterpret_cast<const uint4*>(x + base + c), f);
        *reinterpret_cast<uint4*>(residual + base + c) = sum;
#pragma unroll
        for (int v = 0; v < 8; ++v) ss += f[v] * f[v];
      }
    }
    ss = warp_sum(ss);
    const float r = rsqrtf(ss / float(C) + eps);
    if (lane == 0) rstd[row] = r;
#pragma unroll
    for (int k = 0; k < kVecKept; ++k) {
      const int64_t c = k * 256 + lane * 8;
      if (k < chunks && c < C) *reinterpret_cast<uint4*>(out + base + c) = norm8(a[k], r, w_s + c);
    }
    for (int64_t k = kVecKept; k < chunks; ++k) {
      const int64_t c = k * 256 + lane * 8;
      if (c < C)
        *reinterpret_cast<uint4*>(out + base + c) = norm8(*reinterpret_cast<const uint4*>(residual + base + c), r,
                                                          w_s + c);
    }
  }
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data) % 16 == 0; }

}  // namespace

void add_rmsnorm_fwd(Tensor residual, const Tensor& x, Tensor out, Tensor rstd, const Tensor& weight, float eps) {
  const char* op = "add_rmsnorm_fwd";
  cudaStream_t stream = stream_for(residual, op);
  const int64_t C = last_dim(residual), N = leading_rows(residual);
  check_shape(weight, {C}, op, "weight (C)");
  require_same_numel(x, residual, op, "x", "residual");
  require_same_numel(out, residual, op, "out", "residual");
  RT_CHECK(rstd.numel() == N, op << ": rstd " << rstd.shape_str() << " must have one entry per row (" << N << ")");
  require_dtype_on(rstd, DType::f32, residual.device, op, "rstd");
  RT_CHECK(out.data != residual.data && out.data != x.data, op << ": out must not alias residual or x");
  const FloatPtr res = float_arg(residual, residual.device, op, "residual"), xi = float_arg(x, residual.device, op, "x"),
                 o = float_arg(out, residual.device, op, "out"), w = float_arg(weight, residual.device, op, "weight");
  if (N == 0) return;
  const bool vec = residual.dtype == DType::bf16 && x.dtype == DType::bf16 && out.dtype == DType::bf16 && C % 8 == 0 &&
                   aligned16(residual) && aligned16(x) && aligned16(out) && size_t(C) * sizeof(float) <= 200 * 1024;
  if (vec) {
    const size_t smem = size_t(C) * sizeof(float);
    if (smem > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(add_rmsnorm_fwd_vec_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)));
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, add_rmsnorm_fwd_vec_kernel, kVecWarps * 32,
                                                             smem));
    const int64_t max_blocks = int64_t(device_props().multiProcessorCount) * std::max(per_sm, 1);
    const unsigned blocks = unsigned(std::min<int64_t>((N + kVecWarps - 1) / kVecWarps, max_blocks));
    add_rmsnorm_fwd_vec_kernel<<<blocks, kVecWarps * 32, smem, stream>>>(
        residual.ptr<__nv_bfloat16>(), x.ptr<__nv_bfloat16>(), out.ptr<__nv_bfloat16>(), rstd.ptr<float>(), w, N, C,
        eps);
    CUDA_CHECK_LAUNCH();
    return;
  }
  RT_CHECK(N <= int64_t(0x7fffffff), op << ": " << N << " rows exceed the grid limit; split the call");
  add_rmsnorm_fwd_kernel<<<unsigned(N), kThreads, 0, stream>>>(res, xi, o, rstd.ptr<float>(), w, C, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
