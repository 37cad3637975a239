// attn_fwd_finalize: out (B,Nq,H,D) = acc / l (0 where l == 0), in out's dtype;
// lse (B,H,Nq) f32 = (m + log2(l)) * ln 2, -inf where l == 0. acc is (B,H,Nq,D).
#include "kernels/cuda/attention/attention_common.cuh"

namespace rt {
namespace cuda {
namespace {

// One thread per element of out; the thread with d == 0 also writes the row's lse. For D % 4 != 0.
__global__ void finalize_kernel(FloatPtr out, float* lse, const float* acc, const float* m, const float* l,
                                int64_t n, int64_t Nq, int64_t H, int64_t D) {
  RT_GRID_STRIDE(e, n) {
    const int64_t d = e % D;
    const int64_t h = (e / D) % H;
    const int64_t i = (e / (D * H)) % Nq;
    const int64_t b = e / (D * H * Nq);
    const int64_t row = (b * H + h) * Nq + i;  // (B,H,Nq) index
    const float lr = l[row];
    out.st(e, lr > 0.f ? acc[row * D + d] / lr : 0.f);
    if (d == 0) lse[row] = lr > 0.f ? (m[row] + log2f(lr)) * kLn2 : -INFINITY;
  }
}

// D % 4 == 0: one thread per 4 consecutive elements of out (a float4 of acc, 4 outputs in one 8- or 16-byte store),
// with the index arithmetic in Index (32-bit when the element count allows). The per-element form spent its time
// in 64-bit divisions: 0.13 ms for a (16, 8192, 128) state at d128 64K, about 0.8 TB/s, 8 times per cp = 8 ring.
template <class Index>
__global__ void finalize_vec4_kernel(FloatPtr out, float* lse, const float* acc, const float* m, const float* l,
                                     Index n4, Index Nq, Index H, Index D4) {
  for (Index v = Index(blockIdx.x) * blockDim.x + threadIdx.x; v < n4; v += Index(gridDim.x) * blockDim.x) {
    const Index d4 = v % D4, r = v / D4;  // r: (b, i, h), out's row order
    const Index h = r % H, bi = r / H;
    const Index i = bi % Nq, b = bi / Nq;
    const int64_t row = (int64_t(b) * H + h) * Nq + i;  // (B,H,Nq) index
    const float lr = l[row];
    const float inv = lr > 0.f ? 1.f / lr : 0.f;
    const float4 a = *reinterpret_cast<const float4*>(acc + row * (int64_t(D4) * 4) + int64_t(d4) * 4);
    const float4 o = make_float4(a.x * inv, a.y * inv, a.z * inv, a.w * inv);
    if (out.bf16) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(o.x, o.y), hi = __floats2bfloat162_rn(o.z, o.w);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      reinterpret_cast<uint2*>(out.p)[v] = packed;
    } else {
      reinterpret_cast<float4*>(out.p)[v] = o;
    }
    if (d4 == 0) lse[row] = lr > 0.f ? (m[row] + log2f(lr)) * kLn2 : -INFINITY;
  }
}

}  // namespace

void attn_fwd_finalize(const AttnState& state, Tensor out, Tensor lse) {
  const char* op = "attn_fwd_finalize";
  cudaStream_t stream = stream_for(out, op);
  RT_CHECK(out.ndim == 4, op << ": out has shape " << out.shape_str() << ", expected (B,Nq,H,D)");
  const int64_t B = out.shape[0], Nq = out.shape[1], H = out.shape[2], D = out.shape[3];
  const Device& dev = out.device;
  require_dtype_on(state.acc, DType::f32, dev, op, "state.acc");
  require_dtype_on(state.m, DType::f32, dev, op, "state.m");
  require_dtype_on(state.l, DType::f32, dev, op, "state.l");
  require_dtype_on(lse, DType::f32, dev, op, "lse");
  check_shape(state.acc, {B, H, Nq, D}, op, "state.acc (B,H,Nq,D)");
  check_shape(state.m, {B, H, Nq}, op, "state.m (B,H,Nq)");
  check_shape(state.l, {B, H, Nq}, op, "state.l (B,H,Nq)");
  check_shape(lse, {B, H, Nq}, op, "lse (B,H,Nq)");
  const FloatPtr o = float_arg(out, dev, op, "out");
  const int64_t n = out.numel();
  if (n == 0) return;
  const float *acc = state.acc.ptr<float>(), *m = state.m.ptr<float>(), *l = state.l.ptr<float>();
  if (D % 4 != 0) {
    finalize_kernel<<<grid_for(n), kThreads, 0, stream>>>(o, lse.ptr<float>(), acc, m, l, n, Nq, H, D);
  } else if (n / 4 + 2 * int64_t(grid_for(n / 4)) * kThreads <= int64_t(UINT32_MAX)) {  // v + stride fits
    finalize_vec4_kernel<uint32_t><<<grid_for(n / 4), kThreads, 0, stream>>>(
        o, lse.ptr<float>(), acc, m, l, uint32_t(n / 4), uint32_t(Nq), uint32_t(H), uint32_t(D / 4));
  } else {
    finalize_vec4_kernel<int64_t><<<grid_for(n / 4), kThreads, 0, stream>>>(o, lse.ptr<float>(), acc, m, l, n / 4,
                                                                           Nq, H, D / 4);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
