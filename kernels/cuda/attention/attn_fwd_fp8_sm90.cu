// The FP8 (E4M3) attention forward on Hopper (sm_90a), issue 47's experiment (kernels/attn_fwd_fp8.h has the
// contract; bench/NOTES.md "FP8 attention forward (issue 47): the plan for the kernel"). From fwd v5's structure
// (attn_fwd_sm90ws.cu):
//   * one CTA = 128 query rows (one Q scale group) of one (batch, head); grid (N / 128, H, B), causal tiles heaviest
//     first; 384 threads, 1 CTA per SM;
//   * warpgroup 0, the producer: setmaxnreg.dec to 24; one thread loads the Q tile once and, per 128-key tile, K
//     ((128 keys, 128) e4m3) and V^T ((128 d, 128 keys) e4m3, the quantizer's transposed copy, so that both operands
//     of P V are K-major as FP8 wgmma requires) with TMA into a ring of kFp8Stages stages (16 KB each per operand);
//   * warpgroups 1, 2, the consumers (setmaxnreg.inc to 240): 64 rows each; S_{j+1} = Q K_{j+1}^T (A and B from
//     shared memory) issued with P_j V_j (A = P from registers), the online softmax of S_{j+1} in f32 with
//     q_factor x k_factor x softmax_scale x log2 e in its FMA, P x 448 to E4M3 (attn_fwd_fp8_sm90_tile.cuh), and at
//     the end O x v_factor / l and lse;
//   * causal: only tiles at or left of the diagonal are visited; the diagonal tile is masked element-wise.
// N must be a multiple of 128 (no partial tiles), D = 128. Keep C++17.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention/attn_fwd_fp8_launch.h"
#include "kernels/cuda/attention/attn_fwd_fp8_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_fp8_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace cuda {
namespace {

using namespace fp8fwd;

constexpr int kFp8FwdThreads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kFp8ProducerRegs = 24;
constexpr int kFp8ConsumerRegs = 240;  // 24 x 128 + 240 x 256 <= 64K
constexpr int kFp8Stages = 4;
constexpr uint32_t kFp8TileBytes = 128 * 128;  // a (128, 128) e4m3 tile: Q, one K or one V^T stage
constexpr uint32_t kFp8BarBytes = 1024;
// base (1024-aligned): mbarriers, Q tile, K stages, V^T stages.
constexpr size_t kFp8SmemBytes = 1024 + kFp8BarBytes + kFp8TileBytes * (1 + 2 * kFp8Stages);

struct Bars {
  uint32_t base;  // 8-byte mbarriers: q_full, k_full[S], v_full[S], k_empty[S], v_empty[S]
  __device__ __forceinline__ uint32_t q_full() const { return base; }
  __device__ __forceinline__ uint32_t k_full(int s) const { return base + 8 + 8 * s; }
  __device__ __forceinline__ uint32_t v_full(int s) const { return base + 8 + 8 * (kFp8Stages + s); }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return base + 8 + 8 * (2 * kFp8Stages + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return base + 8 + 8 * (3 * kFp8Stages + s); }
};

struct Fp8FwdParams {
  const float* q_factor;  // (B,H,nblk)
  const float* k_factor;  // (B,Hkv,nblk)
  const float* v_factor;  // (B,Hkv)
  __nv_bfloat16* out;     // (B,N,H,D)
  float* lse;             // (B,H,N)
  int64_t N, H, Hkv, group;
  int nblk;
  bool causal;
  float scale2;  // softmax_scale x log2(e)
};

__global__ void __launch_bounds__(kFp8FwdThreads, 1)
    attn_fwd_fp8_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                        const __grid_constant__ CUtensorMap tm_vt, const Fp8FwdParams p) {
#if RT_WGMMA_AVAILABLE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const Bars bars{base};
  const uint32_t q_tile = base + kFp8BarBytes;                 // (128 rows, 128) e4m3 sw128
  const uint32_t k_tiles = q_tile + kFp8TileBytes;             // (kFp8Stages, 128 keys, 128) e4m3 sw128
  const uint32_t v_tiles = k_tiles + kFp8Stages * kFp8TileBytes;  // (kFp8Stages, 128 d, 128 keys) e4m3 sw128

  const int64_t h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
  const int tile = p.causal ? p.nblk - 1 - int(blockIdx.x) : int(blockIdx.x);  // heaviest causal tiles first
  const int64_t q0 = int64_t(tile) * kRows;
  const int n_tiles = p.causal ? tile + 1 : p.nblk;  // key tiles 0 .. n_tiles-1; causal: the last is the diagonal

  if (threadIdx.x == 0) {
    mbar_init(bars.q_full(), 1);
    for (int s = 0; s < kFp8Stages; ++s) {
      mbar_init(bars.k_full(s), 1);
      mbar_init(bars.v_full(s), 1);
      mbar_init(bars.k_empty(s), 256);  // every consumer thread arrives (see attn_fwd_sm90ws_layout.cuh: C7513)
      mbar_init(bars.v_empty(s), 256);
    }
    mbar_init_fence();
  }
  __syncthreads();

  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 0) {
    // ---- producer ----
    setmaxnreg_dec<kFp8ProducerRegs>();
    if (threadIdx.x == 0) {
      tma_prefetch_desc(&tm_q);
      tma_prefetch_desc(&tm_k);
      tma_prefetch_desc(&tm_vt);
      const int ihk = int(hk), ib = int(b);
      mbar_arrive_expect_tx(bars.q_full(), kFp8TileBytes);
      tma_load_4d(q_tile, &tm_q, bars.q_full(), 0, int(h), int(q0), ib);
      mbar_arrive_expect_tx(bars.k_full(0), kFp8TileBytes);
      tma_load_4d(k_tiles, &tm_k, bars.k_full(0), 0, ihk, 0, ib);
      // K_{j+1} ahead of V_j: the consumers issue S_{j+1} and P_j V_j together.
      for (int j = 0; j < n_tiles; ++j) {
        const int j1 = j + 1;
        if (j1 < n_tiles) {
          const int s = j1 % kFp8Stages;
          if (j1 >= kFp8Stages) mbar_wait(bars.k_empty(s), uint32_t((j1 / kFp8Stages - 1) & 1));
          mbar_arrive_expect_tx(bars.k_full(s), kFp8TileBytes);
          tma_load_4d(k_tiles + uint32_t(s) * kFp8TileBytes, &tm_k, bars.k_full(s), 0, ihk, j1 * kKeys, ib);
        }
        const int s = j % kFp8Stages;
        if (j >= kFp8Stages) mbar_wait(bars.v_empty(s), uint32_t((j / kFp8Stages - 1) & 1));
        mbar_arrive_expect_tx(bars.v_full(s), kFp8TileBytes);
        tma_load_4d(v_tiles + uint32_t(s) * kFp8TileBytes, &tm_vt, bars.v_full(s), j * kKeys, 0, ihk, ib);
      }
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<kFp8ConsumerRegs>();
  const int cw = wg - 1;  // rows cw*64 .. cw*64+63 of the CTA's tile
  const int warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  const int lrow = cw * 64 + warp * 16 + g;  // this thread's rows: lrow and lrow + 8 of the tile
  const float* kf = p.k_factor + (b * p.Hkv + hk) * p.nblk;  // (nblk)
  const float qc = p.q_factor[(b * p.H + h) * p.nblk + tile] * p.scale2;
  const float vf = p.v_factor[b * p.Hkv + hk];
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float o[64];  // (64 rows, 128) accumulator
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  const uint32_t q_wg = q_tile + uint32_t(cw) * 64 * 128;
  float s[64];      // (64 rows, 128 keys) scores
  uint32_t pf[16];  // P of the tile whose P V is pending, E4M3 A fragments
  float alpha[2];
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.f;

  // S_0 and its softmax.
  mbar_wait(bars.q_full(), 0);
  mbar_wait(bars.k_full(0), 0);
  wgmma_fence_regs(s);
  wgmma_fence();
  issue_qk_fp8(s, q_wg, k_tiles);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(s);
  mbar_arrive(bars.k_empty(0));
  softmax_tile_fp8(s, pf, alpha, m_run, l_run, qc * kf[0], p.causal && n_tiles == 1, lrow, t);

  // One step: S_{j+1} with P_j V_j (P_j in pin), the softmax of S_{j+1} into pout. The loop runs the steps in
  // pairs with the two fragments' roles swapped, so that no register copy defines a wgmma input (copying the new P
  // over the old one made ptxas serialize the wgmmas: C7513).
  auto step = [&](int j, uint32_t(&pin)[16], uint32_t(&pout)[16]) {
    const int s1 = (j + 1) % kFp8Stages, s0 = j % kFp8Stages;
    const float c = qc * kf[j + 1];
    mbar_wait(bars.k_full(s1), uint32_t(((j + 1) / kFp8Stages) & 1));
    mbar_wait(bars.v_full(s0), uint32_t((j / kFp8Stages) & 1));
    wgmma_fence_regs(s);
    wgmma_fence_regs(o);
    fence_regs_u32(pin);
    wgmma_fence();
    issue_qk_fp8(s, q_wg, k_tiles + uint32_t(s1) * kFp8TileBytes);
    wgmma_commit();
    issue_pv_fp8(o, pin, v_tiles + uint32_t(s0) * kFp8TileBytes);
    wgmma_commit();
    wgmma_wait<1>();  // S_{j+1} is ready; P_j V_j may still run
    wgmma_fence_regs(s);
    mbar_arrive(bars.k_empty(s1));
    softmax_tile_fp8(s, pout, alpha, m_run, l_run, c, p.causal && j + 2 == n_tiles, lrow, t);
    wgmma_wait<0>();
    wgmma_fence_regs(o);
    fence_regs_u32(pin);
    mbar_arrive(bars.v_empty(s0));
    rescale_o_fp8(o, alpha);
  };
  uint32_t pg[16];  // the other P fragment
  int j = 0;
  for (; j + 2 < n_tiles; j += 2) {
    step(j, pf, pg);
    step(j + 1, pg, pf);
  }
  if (j + 1 < n_tiles) {
    step(j, pf, pg);
#pragma unroll
    for (int i = 0; i < 16; ++i) pf[i] = pg[i];
  }

  // P V of the last tile.
  {
    const int sl = (n_tiles - 1) % kFp8Stages;
    mbar_wait(bars.v_full(sl), uint32_t(((n_tiles - 1) / kFp8Stages) & 1));
    wgmma_fence_regs(o);
    fence_regs_u32(pf);
    wgmma_fence();
    issue_pv_fp8(o, pf, v_tiles + uint32_t(sl) * kFp8TileBytes);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_regs(o);
  }
  store_rows_fp8(p.out, p.lse, p.N, p.H, b, h, q0 + lrow, t, vf, m_run, l_run, o);
#else
  // Built without an sm_90a image: launch_attn_fwd_fp8 refuses such binaries, so this never runs.
  __trap();
#endif
}

// A tensor map over an e4m3 tensor of 4 dims (innermost first) with (128 bytes x box1 x box2 x box3) boxes.
CUtensorMap e4m3_map(const void* base, const uint64_t (&dims)[4], const uint32_t (&box)[4]) {
  const uint64_t strides[3] = {dims[0], dims[0] * dims[1], dims[0] * dims[1] * dims[2]};
  return make_tma_map_sw128(CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, base, 4, dims, strides, box);
}

}  // namespace

void launch_attn_fwd_fp8(const AttnFp8FwdCodes& codes, const AttnFp8FwdDims& dims, bool causal, float softmax_scale,
                         Tensor out, Tensor lse) {
  const char* op = "attn_fwd_fp8_from_codes";
  cudaStream_t stream = stream_for(out, op);
  const int device = out.device.index;
  static int supported[kMaxDevices] = {};  // per device: 0 unknown, 1 yes, 2 no
  int& sup = supported[device_slot(device)];
  if (sup == 0) sup = wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_fwd_fp8_kernel)) ? 1 : 2;
  RT_CHECK(sup == 1, op << ": this GPU (" << device_props().name << ", sm_" << device_props().major
                        << device_props().minor
                        << ") cannot run the FP8 attention kernel: it needs an H100 / H200 (sm_90) and a build with "
                           "sm_90a SASS (RINGTRAIN_CUDA_ARCHS containing 90a)");
  RT_CHECK(dims.D == kD && dims.N % kRows == 0 && dims.N > 0,
           op << ": D = " << dims.D << ", N = " << dims.N << "; the kernel takes D = 128 and N a multiple of 128");
  RT_CHECK(dims.N <= (int64_t(1) << 30) && dims.H <= 65535 && dims.B <= 65535,
           op << ": N = " << dims.N << ", H = " << dims.H << ", B = " << dims.B << " past the kernel's grid and TMA range");
  static bool configured[kMaxDevices] = {};
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kFp8SmemBytes)));
    configured[device_slot(device)] = true;
  }
  const uint64_t B = uint64_t(dims.B), N = uint64_t(dims.N), H = uint64_t(dims.H), Hkv = uint64_t(dims.Hkv),
                 D = uint64_t(dims.D);
  const CUtensorMap tq = e4m3_map(codes.q.data, {D, H, N, B}, {128, 1, uint32_t(kRows), 1});
  const CUtensorMap tk = e4m3_map(codes.k.data, {D, Hkv, N, B}, {128, 1, uint32_t(kKeys), 1});
  const CUtensorMap tvt = e4m3_map(codes.vt.data, {N, D, Hkv, B}, {uint32_t(kKeys), uint32_t(kD), 1, 1});
  Fp8FwdParams p;
  p.q_factor = codes.q_factor.ptr<const float>();
  p.k_factor = codes.k_factor.ptr<const float>();
  p.v_factor = codes.v_factor.ptr<const float>();
  p.out = out.ptr<__nv_bfloat16>();
  p.lse = lse.ptr<float>();
  p.N = dims.N, p.H = dims.H, p.Hkv = dims.Hkv, p.group = dims.H / dims.Hkv;
  p.nblk = int(dims.N / kRows);
  p.causal = causal;
  p.scale2 = softmax_scale * 1.4426950408889634f;
  const dim3 grid(unsigned(p.nblk), unsigned(dims.H), unsigned(dims.B));
  attn_fwd_fp8_kernel<<<grid, kFp8FwdThreads, kFp8SmemBytes, stream>>>(tq, tk, tvt, p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
