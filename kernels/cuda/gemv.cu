// gemm's one-row case on CUDA: c (1,N) = alpha * a (1,K) @ b (N,K)^T + beta * c, a and b bf16, c bf16 or f32,
// f32 accumulation. This is every GEMM of a decode step (one token against the weights). cuBLASLt tiles M = 1 as
// a full tile of rows, so a (2048 x 2048) weight runs on a few dozen CTAs and reads far below the memory's
// bandwidth (bench/NOTES.md "Decode GEMV"); here a CTA of 8 warps takes kRows rows of b, its warps split K, and
// every lane streams 16-byte words of those rows, so even N = 512 gives 128 CTAs and a step reads the weights
// near the bandwidth bound.
//   grid: ceil(N / kRows) CTAs of 256 threads; warp w, lane l reads the 16-byte words i = w*32 + l + j*256 of
//   each of the CTA's rows (a's word i once for all of them), sums in f32, reduces over the warp (shuffles) and
//   then over the 8 warps (shared memory); thread r < kRows writes row r.
// Taken by gemm (gemm.cu) when M = 1, a not transposed, b transposed (the (N,K) weight), both bf16, K % 8 = 0 and
// a, b 16-byte aligned; otherwise cuBLASLt. RT_GEMV=0 sends every case to cuBLASLt (an A/B knob for the decode
// benchmark).
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.h"

namespace rt {
namespace cuda {
namespace {

constexpr int kRows = 4, kWarps = 8, kGemvThreads = 32 * kWarps;

__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(pa[i]), fb = __bfloat1622float2(pb[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

template <class TC>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_rows_kernel(const uint4* __restrict__ a, const uint4* __restrict__ b, TC* __restrict__ c, int64_t N,
                     int64_t words, float alpha, float beta) {
  __shared__ float part[kWarps][kRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = int64_t(blockIdx.x) * kRows;
  const int rows = int(N - row0 < kRows ? N - row0 : kRows);  // the last CTA may hold fewer
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  for (int64_t i = int64_t(warp) * 32 + lane; i < words; i += kGemvThreads) {
    const uint4 x = __ldg(a + i);
    uint4 w[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r < rows) w[r] = __ldcs(b + (row0 + r) * words + i);  // read once: stream past L1 / L2 priority
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r < rows) acc[r] += dot8(x, w[r]);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0) part[warp][r] = s;
  }
  __syncthreads();
  if (threadIdx.x < rows) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += part[w][threadIdx.x];
    const int64_t n = row0 + threadIdx.x;
    float out = alpha * s;
    if (beta != 0.f) out += beta * float(c[n]);
    if constexpr (std::is_same_v<TC, float>) c[n] = out;
    else c[n] = __float2bfloat16(out);
  }
}

bool gemv_enabled() {
  // RT_GEMV: unset or 1 = the kernel where it applies, 0 = cuBLASLt for every gemm. Read once.
  static const bool on = [] {
    const char* v = std::getenv("RT_GEMV");
    const std::string s = v ? v : "1";
    RT_CHECK(s == "0" || s == "1", "RT_GEMV=" << s << " is not 0 (cuBLASLt for one-row gemms) or 1 (the default)");
    return s == "1";
  }();
  return on;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool gemv_applies(const Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, int64_t M,
                  int64_t K) {
  return gemv_enabled() && M == 1 && !trans_a && trans_b && a.dtype == DType::bf16 && b.dtype == DType::bf16 &&
         (c.dtype == DType::bf16 || c.dtype == DType::f32) && K % 8 == 0 && aligned16(a.data) && aligned16(b.data);
}

void gemv_rows(Tensor c, const Tensor& a, const Tensor& b, int64_t N, int64_t K, float alpha, float beta,
               cudaStream_t stream) {
  const unsigned blocks = unsigned((N + kRows - 1) / kRows);
  const uint4* av = static_cast<const uint4*>(a.data);
  const uint4* bv = static_cast<const uint4*>(b.data);
  const int64_t words = K / 8;  // 16-byte words per row
  if (c.dtype == DType::f32)
    gemv_rows_kernel<float><<<blocks, kGemvThreads, 0, stream>>>(av, bv, c.ptr<float>(), N, words, alpha, beta);
  else
    gemv_rows_kernel<__nv_bfloat16><<<blocks, kGemvThreads, 0, stream>>>(av, bv, c.ptr<__nv_bfloat16>(), N, words,
                                                                         alpha, beta);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
