// cross_entropy: logits (n,V), targets (n) i32 (-1 = ignore), losses (n) f32 = -log softmax[target]
// (0 where ignored). When want_grad, logits is overwritten with grad_scale * (softmax - onehot), zero rows
// where ignored. A target outside [-1, V) yields a NaN loss.
// One block of 1024 threads per row, two passes over the row, 16-byte accesses:
//   1. an online max / sum of exp (each thread over its vectors, then merged across the block);
//   2. the loss, and the gradient written over the logits (the row is still in L2: two blocks per SM keep at
//      most 2 x 132 rows in flight, 26 MB at V = 50257 in bf16).
// A row starts wherever row * V puts it, so each pass takes the elements before the first 16-byte boundary and
// after the last one singly. The old kernel (three scalar passes through a dtype switch per element) ran at about
// a fifth of memory speed (bench/NOTES.md).
#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kCeThreads = 1024;
constexpr float kLog2eCe = 1.4426950408889634f;

template <typename T>
struct CeVec;  // one 16-byte access: N elements
template <>
struct CeVec<float> {
  static constexpr int N = 4;
  static __device__ __forceinline__ void load(const float* p, float (&x)[4]) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  }
  static __device__ __forceinline__ void store(float* p, const float (&x)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  }
};
template <>
struct CeVec<__nv_bfloat16> {
  static constexpr int N = 8;
  static __device__ __forceinline__ void load(const __nv_bfloat16* p, float (&x)[8]) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __uint_as_float(w[i] << 16);
      x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  static __device__ __forceinline__ void store(__nv_bfloat16* p, const float (&x)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  }
};

__device__ __forceinline__ float ce_load(const float* p) { return *p; }
__device__ __forceinline__ float ce_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void ce_store(float* p, float x) { *p = x; }
__device__ __forceinline__ void ce_store(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

// (m, s) <- the pair for the union of two element sets, each with max m (in log2 units) and s = sum 2^(x - m).
__device__ __forceinline__ void ce_merge(float& m, float& s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;  // both empty
  s = s * exp2f(m - mn) + s2 * exp2f(m2 - mn);
  m = mn;
}

template <typename T>
__global__ void __launch_bounds__(kCeThreads, 2)
    cross_entropy_kernel(T* logits, const int32_t* targets, float* losses, int64_t V, float grad_scale,
                         bool want_grad) {
  using Vec = CeVec<T>;
  constexpr int N = Vec::N;
  __shared__ float red_m[kCeThreads / 32], red_s[kCeThreads / 32];
  const int64_t row = blockIdx.x;
  T* const x = logits + row * V;  // (V)
  const int32_t target = targets[row];
  const int tid = int(threadIdx.x);
  // Elements [0, head) and [head + nvec * N, V) are taken singly; [head, head + nvec * N) in 16-byte vectors.
  const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(x) & 15) / int64_t(sizeof(T));
  const int64_t head = mis == 0 ? 0 : (N - mis < V ? N - mis : V);
  const int64_t nvec = (V - head) / N;
  const int64_t tail0 = head + nvec * N;
  if (target == -1) {
    if (tid == 0) losses[row] = 0.f;
    if (!want_grad) return;
    const float zero[N] = {};
    for (int64_t v = tid; v < nvec; v += kCeThreads) Vec::store(x + head + v * N, zero);
    if (tid < head) ce_store(x + tid, 0.f);
    if (tail0 + tid < V) ce_store(x + tail0 + tid, 0.f);
    return;
  }
  // Pass 1: this thread's max and sum, in log2 units (x * log2e).
  float m = -INFINITY, s = 0.f;
  for (int64_t v = tid; v < nvec; v += kCeThreads) {
    float e[N];
    Vec::load(x + head + v * N, e);
    float vm = e[0];
#pragma unroll
    for (int i = 1; i < N; ++i) vm = fmaxf(vm, e[i]);
    if (vm == -INFINITY) continue;  // every element -inf: nothing to add (and no -inf - -inf)
    vm *= kLog2eCe;
    float vs = 0.f;
#pragma unroll
    for (int i = 0; i < N; ++i) vs += exp2f(fmaf(e[i], kLog2eCe, -vm));
    ce_merge(m, s, vm, vs);
  }
  if (tid < head) ce_merge(m, s, ce_load(x + tid) * kLog2eCe, 1.f);
  if (tail0 + tid < V) ce_merge(m, s, ce_load(x + tail0 + tid) * kLog2eCe, 1.f);
  // Merge across the warp, then across the warps.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    ce_merge(m, s, m2, s2);
  }
  const int lane = tid & 31, warp = tid >> 5;
  if (lane == 0) red_m[warp] = m, red_s[warp] = s;
  __syncthreads();
  m = lane < kCeThreads / 32 ? red_m[lane] : -INFINITY;
  s = lane < kCeThreads / 32 ? red_s[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    ce_merge(m, s, m2, s2);
  }
  const float lse2 = m + log2f(s);  // log2 of the sum of 2^(x log2e): lse / ln 2
  const bool valid = target >= 0 && target < V;
  if (tid == 0)
    losses[row] = valid ? lse2 / kLog2eCe - ce_load(x + target) : __int_as_float(0x7fc00000);
  if (!want_grad) return;
  __syncthreads();  // the target logit is read before it is overwritten
  // Pass 2: grad = grad_scale * (softmax - onehot), over the logits.
  for (int64_t v = tid; v < nvec; v += kCeThreads) {
    const int64_t c0 = head + v * N;
    float e[N];
    Vec::load(x + c0, e);
#pragma unroll
    for (int i = 0; i < N; ++i)
      e[i] = grad_scale * (exp2f(fmaf(e[i], kLog2eCe, -lse2)) - (c0 + i == target ? 1.f : 0.f));
    Vec::store(x + c0, e);
  }
  if (tid < head)
    ce_store(x + tid, grad_scale * (exp2f(fmaf(ce_load(x + tid), kLog2eCe, -lse2)) - (tid == target ? 1.f : 0.f)));
  if (tail0 + tid < V) {
    const int64_t c = tail0 + tid;
    ce_store(x + c, grad_scale * (exp2f(fmaf(ce_load(x + c), kLog2eCe, -lse2)) - (c == target ? 1.f : 0.f)));
  }
}

}  // namespace

void cross_entropy(Tensor logits, const Tensor& targets, Tensor losses, float grad_scale, bool want_grad) {
  const char* op = "cross_entropy";
  cudaStream_t stream = stream_for(logits, op);
  const int64_t V = last_dim(logits), n = leading_rows(logits);
  RT_CHECK(targets.numel() == n, op << ": targets " << targets.shape_str() << " must have one entry per row (" << n << ")");
  RT_CHECK(losses.numel() == n, op << ": losses " << losses.shape_str() << " must have one entry per row (" << n << ")");
  require_dtype_on(targets, DType::i32, logits.device, op, "targets");
  require_dtype_on(losses, DType::f32, logits.device, op, "losses");
  const FloatPtr lg = float_arg(logits, logits.device, op, "logits");
  if (n == 0) return;
  RT_CHECK(n <= int64_t(0x7fffffff), op << ": " << n << " rows exceed the grid limit; split the call");
  if (lg.bf16)
    cross_entropy_kernel<__nv_bfloat16><<<unsigned(n), kCeThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(lg.p), targets.ptr<int32_t>(), losses.ptr<float>(), V, grad_scale, want_grad);
  else
    cross_entropy_kernel<float><<<unsigned(n), kCeThreads, 0, stream>>>(
        static_cast<float*>(lg.p), targets.ptr<int32_t>(), losses.ptr<float>(), V, grad_scale, want_grad);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
