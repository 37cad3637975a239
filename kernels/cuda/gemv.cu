// gemm's one-row case on CUDA: c (1,N) = alpha * a (1,K) @ b (N,K)^T + beta * c, a and b bf16, c bf16 or f32,
// f32 accumulation. This is every GEMM of a decode step (one token against the weights). cuBLASLt tiles M = 1 as
// a full tile of rows, so a (2048 x 2048) weight runs on a few dozen CTAs and reads far below the memory's
// bandwidth (bench/NOTES.md "Decode GEMV"); here a CTA of 8 warps takes kRows rows of b, its warps split K, and
// every lane streams 16-byte words of those rows, so even N = 512 gives 128 CTAs and a step reads the weights
// near the bandwidth bound.
//   grid: ceil(N / kRows) CTAs of 256 threads; warp w, lane l reads the 16-byte words i = w*32 + l + j*256 of
//   each of the CTA's rows (a's word i once for all of them), sums in f32 over its words in ascending order,
//   reduces over the warp (shuffles) and then over the 8 warps (shared memory); thread r < kRows writes row r.
// Taken by gemm (gemm.cu) when M = 1, a not transposed, b transposed (the (N,K) weight), both bf16, K % 8 = 0 and
// a, b 16-byte aligned; otherwise cuBLASLt. RT_GEMV=0 sends every case to cuBLASLt (an A/B knob for the decode
// benchmark).
// The same kernel also takes the op before a decode Linear into its input (kernels/decode_linear.h): the RMSNorm
// (each CTA reduces the 2-8 KB row itself, from L2, while its first weight words are in flight) or SwiGLU (the gate
// and up words read from L2), with that op's float math and bf16 rounding, so a fused call equals the two calls
// bit for bit and a decode layer runs 3 launches fewer (bench/NOTES.md "Decode: the norms and SwiGLU in the GEMV").
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/swiglu_common.cuh"

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

// What the kernel multiplies: a itself, or the op before the Linear applied to it on the fly, each with the float
// math and the bf16 rounding of that op's own kernel, so the fused call gives the two calls' bits.
enum class GemvInput { plain, rmsnorm, swiglu };

struct GemvIn {
  const uint4* a;       // plain (1,K) | rmsnorm: x (1,K) | swiglu: gate_up (1,2K), the gate words then the up words
  const uint4* norm_w;  // rmsnorm: (K) bf16, the norm's weight
  float eps;            // rmsnorm
  int64_t K;
};

// rmsnorm_fwd's rstd of the row (kernels/cuda/rmsnorm_fwd.cu): the same strided f32 sum over 256 threads, the same
// block_sum, the same rsqrt, so the same bits.
__device__ __forceinline__ float row_rstd(const GemvIn& in, float* red) {
  const __nv_bfloat16* x = reinterpret_cast<const __nv_bfloat16*>(in.a);
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < in.K; c += kGemvThreads) {
    const float v = __bfloat162float(x[c]);
    ss += v * v;
  }
  ss = block_sum(ss, red);
  return rsqrtf(ss / float(in.K) + in.eps);
}

// Word i (8 columns) of the Linear's input, rounded to bf16 as the unfused op stores it.
template <GemvInput kIn>
__device__ __forceinline__ uint4 input_word(const GemvIn& in, int64_t i, float rstd) {
  if constexpr (kIn == GemvInput::plain) {
    return __ldg(in.a + i);
  } else if constexpr (kIn == GemvInput::rmsnorm) {  // rmsnorm_fwd: out = x * r * weight
    float x[8], nw[8], o[8];
    bf16x8_to_float(__ldg(in.a + i), x);
    bf16x8_to_float(__ldg(in.norm_w + i), nw);
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = x[e] * rstd * nw[e];
    return float_to_bf16x8(o);
  } else {  // swiglu_fwd: out = silu(gate) * up, as swiglu_fwd_vec8_kernel
    float g[8], u[8], o[8];
    bf16x8_to_float(__ldg(in.a + i), g);
    bf16x8_to_float(__ldg(in.a + in.K / 8 + i), u);
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = g[e] / (1.f + __expf(-g[e])) * u[e];
    return float_to_bf16x8(o);
  }
}

template <class TC, GemvInput kIn>
__global__ void __launch_bounds__(kGemvThreads, 5)  // 5 CTAs an SM: at most 51 registers
    gemv_rows_kernel(const GemvIn in, const uint4* __restrict__ b, TC* __restrict__ c, int64_t N, float alpha,
                     float beta) {
  __shared__ float part[kWarps][kRows];
  __shared__ float red[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = int64_t(blockIdx.x) * kRows, words = in.K / 8;
  const int rows = int(N - row0 < kRows ? N - row0 : kRows);  // the last CTA may hold fewer
  const int64_t first = int64_t(warp) * 32 + lane;
  // The first word's weights are requested before the norm's reduction, so the stream starts at once. One word
  // of kRows rows in flight per thread: more (unrolled) costs registers, and the CTAs resident per SM with them.
  uint4 w[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    if (first < words && r < rows) w[r] = __ldcs(b + (row0 + r) * words + first);  // read once: stream past L1 / L2
  float rstd = 0.f;
  if constexpr (kIn == GemvInput::rmsnorm) rstd = row_rstd(in, red);
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
  for (int64_t i = first; i < words; i += kGemvThreads) {
    if (i != first) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        if (r < rows) w[r] = __ldcs(b + (row0 + r) * words + i);
    }
    const uint4 x = input_word<kIn>(in, i, rstd);
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
    for (int wp = 0; wp < kWarps; ++wp) s += part[wp][threadIdx.x];
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

namespace {

template <GemvInput kIn>
void launch_gemv(Tensor c, const GemvIn& in, const Tensor& b, int64_t N, float alpha, float beta,
                 cudaStream_t stream) {
  const unsigned blocks = unsigned((N + kRows - 1) / kRows);
  const uint4* bv = static_cast<const uint4*>(b.data);
  if (c.dtype == DType::f32)
    gemv_rows_kernel<float, kIn><<<blocks, kGemvThreads, 0, stream>>>(in, bv, c.ptr<float>(), N, alpha, beta);
  else
    gemv_rows_kernel<__nv_bfloat16, kIn><<<blocks, kGemvThreads, 0, stream>>>(in, bv, c.ptr<__nv_bfloat16>(), N,
                                                                              alpha, beta);
  CUDA_CHECK_LAUNCH();
}

bool fusion_enabled() {
  // RT_GEMV_FUSED: unset or 1 = the decode's norm and SwiGLU inside the GEMV where it applies, 0 = separate calls
  // (an A/B knob for the decode benchmark). Read once.
  static const bool on = [] {
    const char* v = std::getenv("RT_GEMV_FUSED");
    const std::string s = v ? v : "1";
    RT_CHECK(s == "0" || s == "1", "RT_GEMV_FUSED=" << s << " is not 0 (separate norm / SwiGLU calls) or 1 (the "
                                                    << "default)");
    return s == "1";
  }();
  return on;
}

// The fused calls' common conditions: a bf16 one-row input of per_k * K columns (K = w's), w (N,K) bf16, c (1,N)
// bf16 or f32, all on one device and 16-byte aligned where read as words.
bool fused_applies(const Tensor& c, const Tensor& a, int64_t per_k, const Tensor& w) {
  if (!gemv_enabled() || !fusion_enabled() || w.ndim != 2) return false;
  const int64_t N = w.size(0), K = w.size(1);
  return a.dtype == DType::bf16 && w.dtype == DType::bf16 && (c.dtype == DType::bf16 || c.dtype == DType::f32) &&
         a.numel() == per_k * K && c.numel() == N && K % 8 == 0 && K > 0 && N > 0 && aligned16(a.data) &&
         aligned16(w.data) && a.device == w.device && c.device == w.device;
}

}  // namespace

void gemv_rows(Tensor c, const Tensor& a, const Tensor& b, int64_t N, int64_t K, float alpha, float beta,
               cudaStream_t stream) {
  launch_gemv<GemvInput::plain>(c, GemvIn{static_cast<const uint4*>(a.data), nullptr, 0.f, K}, b, N, alpha, beta,
                                stream);
}

bool rmsnorm_gemv(Tensor c, const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w) {
  const char* op = "rmsnorm_gemv";
  if (!fused_applies(c, x, 1, w) || norm_weight.numel() != w.size(1) || norm_weight.dtype != DType::bf16 ||
      !aligned16(norm_weight.data) || !(norm_weight.device == w.device))
    return false;
  launch_gemv<GemvInput::rmsnorm>(c, GemvIn{static_cast<const uint4*>(x.data),
                                            static_cast<const uint4*>(norm_weight.data), eps, w.size(1)},
                                  w, w.size(0), 1.f, 0.f, stream_for(w, op));
  return true;
}

bool swiglu_gemv(Tensor c, const Tensor& gate_up, const Tensor& w, float beta) {
  const char* op = "swiglu_gemv";
  if (!fused_applies(c, gate_up, 2, w)) return false;
  launch_gemv<GemvInput::swiglu>(c, GemvIn{static_cast<const uint4*>(gate_up.data), nullptr, 0.f, w.size(1)}, w,
                                 w.size(0), 1.f, beta, stream_for(w, op));
  return true;
}

}  // namespace cuda
}  // namespace rt
