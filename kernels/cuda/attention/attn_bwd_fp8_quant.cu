// attn_bwd_fp8_quantize on CUDA (kernels/attn_bwd_fp8.h has the layouts): bf16 Q, dO and K into the transposed E4M3
// codes and f32 factors of the FP8 attention backward, with kernels/fp8.h's rounding (fp8_common.cuh: the host rule
// bit for bit; tests/gpu/test_cuda_attn_bwd_fp8.cpp checks it against a host quantizer).
// One CTA per (128-row block, head, sample) (blockIdx.x up to the larger of Nq / 128 and Nk / 128; a CTA past its
// tensor's blocks returns); blockIdx.y walks the H query heads of Q, then the H heads of dO, then
// the Hkv heads of K. A CTA loads its (128 rows, D = 128) group into registers (256 threads, each 8 chunks of 8 bf16:
// chunk c = thread + 256 j is row c / 16, columns (c % 16) * 8 .. + 8), takes the amax over the CTA, writes the codes
// transposed into a shared (D, 128) tile (Q and dO with their rows permuted per 16 as the kernel's register
// fragments hold them), and stores the tile's D rows of 128 bytes to the (.., D, N) output. Keep C++17.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention/attn_bwd_fp8_launch.h"
#include "kernels/cuda/attention/attn_fp8_quant_common.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/fp8_common.cuh"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace {

using namespace attn_fp8_quant;  // kThreads, kRows (kAttnFp8BwdBlock), kD, kChunks; the group's load, amax, transpose

struct BwdQuantArgs {
  const __nv_bfloat16* q;     // (B,Nq,H,D)
  const __nv_bfloat16* dout;  // (B,Nq,H,D)
  const __nv_bfloat16* k;     // (B,Nk,Hkv,D)
  uint8_t* qt;                // (B,H,D,Nq), queries permuted per 16
  uint8_t* dot;               // (B,H,D,Nq), queries permuted per 16
  uint8_t* kt;                // (B,Hkv,D,Nk), natural order
  float* q_factor;            // (B,H,Nq/128)
  float* do_factor;           // (B,H,Nq/128)
  float* k_factor;            // (B,Hkv,Nk/128)
  int64_t Nq, Nk, H, Hkv;
};

__global__ void __launch_bounds__(kThreads) attn_bwd_fp8_quantize_kernel(const BwdQuantArgs a) {
  __shared__ uint32_t red[kThreads / 32];
  __shared__ __align__(16) uint8_t tile[kD * kRows];  // (D, 128 rows of the group) codes, swizzled
  const int64_t blk = blockIdx.x, y = blockIdx.y, b = blockIdx.z;
  // Which tensor this CTA quantizes: 0 Q, 1 dO, 2 K.
  const int which = y < a.H ? 0 : y < 2 * a.H ? 1 : 2;
  const int64_t head = which == 0 ? y : which == 1 ? y - a.H : y - 2 * a.H;
  const int64_t heads = which == 2 ? a.Hkv : a.H;
  const __nv_bfloat16* src = which == 0 ? a.q : which == 1 ? a.dout : a.k;
  uint8_t* dst = which == 0 ? a.qt : which == 1 ? a.dot : a.kt;
  float* factor = which == 0 ? a.q_factor : which == 1 ? a.do_factor : a.k_factor;
  const bool permute = which != 2;
  const int64_t N = which == 2 ? a.Nk : a.Nq, nblk = N / kRows;  // rows of this tensor, its 128-row blocks
  if (blk >= nblk) return;                                         // the grid spans the larger of the two

  // The group: rows blk*128 .. +127 of head `head`, row stride heads * D.
  uint4 raw[kChunks];
  load_group(src + ((b * N + blk * kRows) * heads + head) * kD, heads * kD, raw);
  const float s = fp8_scale_of(amax_of_key(cta_max_key(thread_amax_key(raw), red)));
  uint8_t* out = dst + (b * heads + head) * kD * N + blk * kRows;  // row d at out + d * N
  store_codes_transposed(raw, s, permute, tile, out, N);
  if (threadIdx.x == 0) factor[(b * heads + head) * nblk + blk] = fp8_factor_of(s);
}

}  // namespace

void launch_attn_bwd_fp8_quantize(const Tensor& q, const Tensor& k, const Tensor& dout, const AttnFp8BwdCodes& codes,
                                  const AttnFp8BwdDims& dims) {
  cudaStream_t stream = stream_for(q, "attn_bwd_fp8_quantize");
  RT_CHECK(dims.D == kD && dims.Nq % kRows == 0 && dims.Nk % kRows == 0,
           "attn_bwd_fp8_quantize: D = " << dims.D << ", Nq = " << dims.Nq << ", Nk = " << dims.Nk
                                         << "; the kernel takes D = 128 and Nq, Nk multiples of 128");
  const int64_t nblk = std::max(dims.Nq, dims.Nk) / kRows;  // grid.x: the longer tensor's blocks
  RT_CHECK(nblk <= 0x7FFFFFFF && 2 * dims.H + dims.Hkv <= 65535 && dims.B <= 65535,
           "attn_bwd_fp8_quantize: grid too large (max(Nq, Nk) / 128 = "
               << nblk << ", 2 H + Hkv = " << 2 * dims.H + dims.Hkv << ", B = " << dims.B << ")");
  if (dims.B == 0 || nblk == 0) return;
  BwdQuantArgs a;
  a.q = q.ptr<const __nv_bfloat16>();
  a.dout = dout.ptr<const __nv_bfloat16>();
  a.k = k.ptr<const __nv_bfloat16>();
  a.qt = codes.qt.ptr<uint8_t>();
  a.dot = codes.dot.ptr<uint8_t>();
  a.kt = codes.kt.ptr<uint8_t>();
  a.q_factor = codes.q_factor.ptr<float>();
  a.do_factor = codes.do_factor.ptr<float>();
  a.k_factor = codes.k_factor.ptr<float>();
  a.Nq = dims.Nq, a.Nk = dims.Nk, a.H = dims.H, a.Hkv = dims.Hkv;
  const dim3 grid(unsigned(nblk), unsigned(2 * dims.H + dims.Hkv), unsigned(dims.B));
  attn_bwd_fp8_quantize_kernel<<<grid, kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
