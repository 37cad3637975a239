// rmsnorm_bwd: with y = x * r * w, r = rsqrt(mean(x^2) + eps):
//   dx (N,C) += r * w * g - x * r^3 * mean(g * w * x)      (accumulates: the residual-stream gradient)
//   dweight (C) f32 += sum over rows of g * x * r
// One warp per row, no block barrier inside the row loop, so every warp of the SM has a row's loads in flight (the
// block-per-row version kept 3 rows in flight per SM, each behind two barriers and two dependent loads: 2.05 ms per
// call at 64K x 2048, 8x its memory time). Each lane owns the same columns in every row; a row's dout, x and dx are
// loaded together and stay in registers between the dot product and the update (as raw bf16x8 vectors on the bf16
// path: rows up to 2048 columns; wider rows re-read the rest). The weight is staged in shared memory as f32. Each
// warp sums its rows' dweight terms into its own shared-memory row with plain adds (its lanes own disjoint
// columns, so nothing races); at the end the block adds its warps' rows and issues one global atomic per column.
// (Shared-memory float atomics are CAS loops on sm_90, ATOMS.CAST.SPIN: with one per element the kernel ran at
// 5-6x its memory time.) Warps per block: up to 4, fewer for wide rows so that (1 + warps) x C floats fit.
// Paths: all of dx, dout and x bf16 with C % 8 == 0 and 16-byte aligned rows: 16-byte loads and stores (Bf16x8);
// otherwise one element per lane access through FloatPtr (Scalar), the same arithmetic.
#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kMaxRowWarps = 4;  // warps per block, one row each at a time
constexpr size_t kSmemBudget = 200 * 1024;
constexpr int kKeptChunks = 8;    // chunks of 32 lanes x V columns kept in registers per row

// 8 bf16 columns per lane access (one 16-byte load).
struct Bf16x8 {
  static constexpr int V = 8;
  using Raw = uint4;
  __device__ __forceinline__ static Raw load(FloatPtr p, int64_t i) {
    return *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.p) + i);
  }
  __device__ __forceinline__ static void unpack(const Raw& r, FloatPtr, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&r);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 t = __bfloat1622float2(h[k]);
      f[2 * k] = t.x, f[2 * k + 1] = t.y;
    }
  }
  __device__ __forceinline__ static void store(FloatPtr p, int64_t i, const float* f) {
    uint4 r;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.p) + i) = r;
  }
};

// One column per lane access, f32 or bf16 per tensor.
struct Scalar {
  static constexpr int V = 1;
  using Raw = float;
  __device__ __forceinline__ static Raw load(FloatPtr p, int64_t i) { return p.ld(i); }
  __device__ __forceinline__ static void unpack(const Raw& r, FloatPtr, float* f) { f[0] = r; }
  __device__ __forceinline__ static void store(FloatPtr p, int64_t i, const float* f) { p.st(i, f[0]); }
};

template <class A>
__global__ void __launch_bounds__(kMaxRowWarps * 32) rmsnorm_bwd_kernel(FloatPtr dx, float* dweight, FloatPtr dout,
                                                                  FloatPtr x, FloatPtr weight, const float* rstd,
                                                                  int64_t N, int64_t C) {
  constexpr int V = A::V;
  extern __shared__ float smem[];
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  float* w_s = smem;       // (C) the weight, f32
  float* dw_s = smem + C;  // (warps, C) each warp's dweight partial
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) w_s[c] = weight.ld(c);
  for (int64_t c = threadIdx.x; c < int64_t(warps) * C; c += blockDim.x) dw_s[c] = 0.f;
  __syncthreads();
  float* dw_w = dw_s + int64_t(threadIdx.x >> 5) * C;  // this warp's row: only its lanes touch its columns
  const int64_t chunk_cols = 32 * V;                        // columns per chunk of the row
  const int64_t chunks = (C + chunk_cols - 1) / chunk_cols;  // the last one may be partial (V divides C)
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < N; row += int64_t(gridDim.x) * warps) {
    const int64_t base = row * C;
    const float r = rstd[row];
    // This lane's columns of the first chunks: dout, x and dx all loaded at once (one round trip per row).
    typename A::Raw g_kept[kKeptChunks], x_kept[kKeptChunks], d_kept[kKeptChunks];
#pragma unroll
    for (int k = 0; k < kKeptChunks; ++k) {
      const int64_t c = k * chunk_cols + lane * V;
      if (k < chunks && c < C)
        g_kept[k] = A::load(dout, base + c), x_kept[k] = A::load(x, base + c), d_kept[k] = A::load(dx, base + c);
    }
    float dot = 0.f;  // sum_c g * w * x
#pragma unroll
    for (int k = 0; k < kKeptChunks; ++k) {
      const int64_t c = k * chunk_cols + lane * V;
      if (k < chunks && c < C) {
        float g[V], xv[V];
        A::unpack(g_kept[k], dout, g), A::unpack(x_kept[k], x, xv);
#pragma unroll
        for (int v = 0; v < V; ++v) dot += g[v] * w_s[c + v] * xv[v];
      }
    }
    for (int64_t k = kKeptChunks; k < chunks; ++k) {  // wide rows: the rest, re-read in the update
      const int64_t c = k * chunk_cols + lane * V;
      if (c < C) {
        float g[V], xv[V];
        A::unpack(A::load(dout, base + c), dout, g), A::unpack(A::load(x, base + c), x, xv);
#pragma unroll
        for (int v = 0; v < V; ++v) dot += g[v] * w_s[c + v] * xv[v];
      }
    }
    dot = warp_sum(dot);
    const float k3 = r * r * r * dot / float(C);
    auto update = [&](int64_t c, const typename A::Raw& dx_raw, const float* g, const float* xv) {
      float d[V];
      A::unpack(dx_raw, dx, d);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        d[v] += r * w_s[c + v] * g[v] - xv[v] * k3;
        dw_w[c + v] += g[v] * xv[v] * r;
      }
      A::store(dx, base + c, d);
    };
#pragma unroll
    for (int k = 0; k < kKeptChunks; ++k) {
      const int64_t c = k * chunk_cols + lane * V;
      if (k < chunks && c < C) {
        float g[V], xv[V];
        A::unpack(g_kept[k], dout, g), A::unpack(x_kept[k], x, xv);
        update(c, d_kept[k], g, xv);
      }
    }
    for (int64_t k = kKeptChunks; k < chunks; ++k) {
      const int64_t c = k * chunk_cols + lane * V;
      if (c < C) {
        float g[V], xv[V];
        A::unpack(A::load(dout, base + c), dout, g), A::unpack(A::load(x, base + c), x, xv);
        update(c, A::load(dx, base + c), g, xv);
      }
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += dw_s[int64_t(w) * C + c];
    atomicAdd(dweight + c, sum);
  }
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data) % 16 == 0; }

template <class A>
void launch(cudaStream_t stream, FloatPtr dx, float* dweight, FloatPtr dout, FloatPtr x, FloatPtr weight,
            const float* rstd, int64_t N, int64_t C, const char* op) {
  // (1 + warps) x C floats of shared memory: the weight and each warp's dweight partial.
  const int warps = int(std::min<int64_t>(kMaxRowWarps, int64_t(kSmemBudget / (size_t(C) * sizeof(float))) - 1));
  RT_CHECK(warps >= 1, op << ": C=" << C << " exceeds the 25600 columns this kernel supports");
  const int threads = warps * 32;
  const size_t smem = size_t(1 + warps) * size_t(C) * sizeof(float);
  if (smem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_bwd_kernel<A>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // As many resident blocks as fit, each warp walking rows; fewer when there are fewer rows than warps.
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rmsnorm_bwd_kernel<A>, threads, smem));
  const int64_t max_blocks = int64_t(device_props().multiProcessorCount) * (per_sm > 0 ? per_sm : 1);
  const int64_t needed = (N + warps - 1) / warps;
  const unsigned blocks = unsigned(needed < max_blocks ? needed : max_blocks);
  rmsnorm_bwd_kernel<A><<<blocks, threads, smem, stream>>>(dx, dweight, dout, x, weight, rstd, N, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_bwd(Tensor dx, Tensor dweight, const Tensor& dout, const Tensor& x, const Tensor& weight,
                 const Tensor& rstd) {
  const char* op = "rmsnorm_bwd";
  cudaStream_t stream = stream_for(x, op);
  const int64_t C = last_dim(x), N = leading_rows(x);
  check_shape(weight, {C}, op, "weight (C)");
  check_shape(dweight, {C}, op, "dweight (C)");
  require_dtype_on(dweight, DType::f32, x.device, op, "dweight");
  require_dtype_on(rstd, DType::f32, x.device, op, "rstd");
  require_same_numel(dx, x, op, "dx", "x");
  require_same_numel(dout, x, op, "dout", "x");
  RT_CHECK(rstd.numel() == N, op << ": rstd " << rstd.shape_str() << " must have one entry per row (" << N << ")");
  const FloatPtr dxp = float_arg(dx, x.device, op, "dx"), g = float_arg(dout, x.device, op, "dout"),
                 xp = float_arg(x, x.device, op, "x"), w = float_arg(weight, x.device, op, "weight");
  if (N == 0 || C == 0) return;
  const bool vec = dx.dtype == DType::bf16 && dout.dtype == DType::bf16 && x.dtype == DType::bf16 && C % 8 == 0 &&
                   aligned16(dx) && aligned16(dout) && aligned16(x);
  if (vec) launch<Bf16x8>(stream, dxp, dweight.ptr<float>(), g, xp, w, rstd.ptr<float>(), N, C, op);
  else launch<Scalar>(stream, dxp, dweight.ptr<float>(), g, xp, w, rstd.ptr<float>(), N, C, op);
}

}  // namespace cuda
}  // namespace rt
