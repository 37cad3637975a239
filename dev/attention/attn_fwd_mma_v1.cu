// dev/attention (built with -DRINGTRAIN_DEV_KERNELS=ON only; see README.md): the mma.sync forward with every
// tile shape it was measured with: v1 (8 warps x 16 rows, Q in registers), v2 (4 warps x 32 rows) and v3
// (8 warps x 32 rows). kernels/cuda/attention/attn_fwd_sm80.cu ships v2 and v3; this copy keeps v1, measured slower.
// Entry: rt::cuda::dev::launch_attn_fwd_mma_dev(1, ...) (v1 only is instantiated), the launcher of the shipping file's
// contract (AttnFwdParams from kernels/cuda/attention/attn_fwd_dispatch.cu's attn_fwd_params).
// attn_fwd_block on CUDA: continues the fp32 online-softmax state (acc, m, l) with one K/V block.
// Flash-attention-2 style kernel on mma.sync m16n8k16 (bf16 in, f32 accumulate):
//   * one CTA = 128 query rows of one (batch, head); each warp owns MT x 16 rows (v2: MT = 2, 4 warps;
//     v1: MT = 1, 8 warps). More rows per warp means each K/V fragment read from shared memory feeds more
//     mma, which is what limits mma.sync attention on Hopper (shared-memory bandwidth);
//   * K/V tiles of 64 keys are double-buffered in shared memory with cp.async, so the next tile's
//     load overlaps this tile's math; Q stays in shared memory and is re-read per tile (v2) or held in
//     registers (v1);
//   * scores are prescaled by scale*log2(e) inside one FFMA feeding ex2; m is kept in that log2 domain;
//   * causal: key tiles wholly above the diagonal are never visited, and only tiles that cross the
//     diagonal or the key-range end are masked;
//   * the state is read at the start and written at the end, so the kernel resumes across ring steps
//     (acc is not read for rows whose m is -inf: such rows have seen no key, so acc is 0 by definition).
// Rows outside [q_begin, q_end) are left untouched; a row that sees no key keeps m = -inf, l = 0.
// Variant choice: attn_fwd_variant() below (v2, or v3 for long D = 128 rows, or the wgmma kernels v4 of
// attn_fwd_sm90.cu / v5 of attn_fwd_sm90ws.cu on compute capability 9.0; RT_ATTN_FWD_VARIANT forces one).
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {
namespace dev {
namespace {

// Br = 16 * MT * WARPS query rows per CTA (128 for v1 and v2, 256 for v3).
constexpr int kFwdKeysPerTile = 64;  // Bc

template <int D, int BR>
constexpr size_t fwd_smem_bytes() {
  return size_t(BR + 4 * kFwdKeysPerTile) * D * 2;  // Q + K[2] + V[2]
}

// MT: 16-row m-tiles per warp; WARPS warps; BR = 16 * MT * WARPS rows per CTA.
template <int D, int MT, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, (MT == 2 && WARPS == 4) || (MT == 1 && D == 64) ? 2 : 1)
    attn_fwd_kernel(const AttnFwdParams p) {
  constexpr int kFwdRowsPerCta = 16 * MT * WARPS;
  constexpr int kThreads = WARPS * 32;
  constexpr int kKSlices = D / 16;   // k-steps of the QK^T mma
  constexpr int kDTiles = D / 8;     // n-tiles of the output
  constexpr int kSTiles = kFwdKeysPerTile / 8;  // n-tiles of the scores
  constexpr bool kQInRegisters = MT == 1;
  constexpr int kRows = 2 * MT;      // rows this thread holds: g + 8r within each m-tile
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_tile = smem_addr(smem);                                  // (128, D) bf16
  const uint32_t k_tiles = q_tile + kFwdRowsPerCta * D * 2;                 // (2, 64, D) bf16
  const uint32_t v_tiles = k_tiles + 2 * kFwdKeysPerTile * D * 2;           // (2, 64, D) bf16
  constexpr uint32_t kKVTileBytes = kFwdKeysPerTile * D * 2;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment row group and thread-in-group
  const int tile = p.num_q_tiles - 1 - int(blockIdx.x);  // heaviest (causal) tiles first
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / p.group;
  const int64_t q0 = p.q_begin + int64_t(tile) * kFwdRowsPerCta;
  const int64_t q_last = min(q0 + kFwdRowsPerCta, p.q_end) - 1;

  // Keys this CTA visits: [k_lo, k_hi).
  const int64_t k_lo = p.k_begin;
  int64_t k_hi = p.k_end;
  if (p.causal) k_hi = min(k_hi, q_last + p.diag + 1);
  if (k_hi <= k_lo) return;  // no visible key: state untouched
  const int n_tiles = int((k_hi - k_lo + kFwdKeysPerTile - 1) / kFwdKeysPerTile);

  const int64_t q_stride = p.H * D, kv_stride = p.Hkv * D;  // elements between token rows
  const __nv_bfloat16* q_head = p.q + (b * p.Nq * p.H + h) * D;
  const __nv_bfloat16* k_head = p.k + (b * p.Nk * p.Hkv + hk) * D;
  const __nv_bfloat16* v_head = p.v + (b * p.Nk * p.Hkv + hk) * D;

  // Prologue: Q tile and the first K/V tile.
  load_tile_async<kFwdRowsPerCta, D, kThreads>(q_tile, q_head, q_stride, q0, p.q_end);
  cp_async_commit();
  load_tile_async<kFwdKeysPerTile, D, kThreads>(k_tiles, k_head, kv_stride, k_lo, k_hi);
  load_tile_async<kFwdKeysPerTile, D, kThreads>(v_tiles, v_head, kv_stride, k_lo, k_hi);
  cp_async_commit();

  // This thread's rows (m-tile mi, half r): local row lrow[x] = warp*16*MT + mi*16 + r*8 + g, x = 2*mi + r.
  const int64_t bh_row0 = (b * p.H + h) * p.Nq;  // (B,H,Nq) index of row 0 of this head
  int lrow[kRows];
  float m_run[kRows], l_run[kRows];  // l: per-thread partial sums, reduced across the quad at the end
  float o[MT][kDTiles][4];           // (16*MT rows, D) accumulator fragments
#pragma unroll
  for (int x = 0; x < kRows; ++x) {
    lrow[x] = warp * 16 * MT + (x / 2) * 16 + (x % 2) * 8 + g;
    const bool ok = q0 + lrow[x] < p.q_end;
    m_run[x] = ok ? p.m[bh_row0 + q0 + lrow[x]] : -INFINITY;
    l_run[x] = (ok && t == 0) ? p.l[bh_row0 + q0 + lrow[x]] : 0.f;
  }
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int x = mi * 2 + r;
      const bool seen = m_run[x] != -INFINITY;  // false also for rows past q_end
      const float* acc_row = p.acc + (bh_row0 + q0 + lrow[x]) * D;
#pragma unroll
      for (int nt = 0; nt < kDTiles; ++nt) {
        const float2 va = seen ? *reinterpret_cast<const float2*>(acc_row + nt * 8 + 2 * t) : make_float2(0.f, 0.f);
        o[mi][nt][2 * r] = va.x;
        o[mi][nt][2 * r + 1] = va.y;
      }
    }
  }

  uint32_t qf[kQInRegisters ? kKSlices : 1][4];  // v1: Q fragments of this warp's 16 rows
  cp_async_wait<1>();  // the Q group has landed (the first K/V group may still be in flight)
  __syncthreads();
  if (kQInRegisters) {
#pragma unroll
    for (int kk = 0; kk < kKSlices; ++kk)
      ldmatrix_x4(qf[kQInRegisters ? kk : 0], q_tile + tile_offset<D>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
  }

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < n_tiles) {  // prefetch the next K/V tile into the other buffer
      const uint32_t buf = uint32_t((it + 1) & 1) * kKVTileBytes;
      const int64_t next = k_lo + int64_t(it + 1) * kFwdKeysPerTile;
      load_tile_async<kFwdKeysPerTile, D, kThreads>(k_tiles + buf, k_head, kv_stride, next, k_hi);
      load_tile_async<kFwdKeysPerTile, D, kThreads>(v_tiles + buf, v_head, kv_stride, next, k_hi);
      cp_async_commit();
    }
    const uint32_t ks = k_tiles + uint32_t(it & 1) * kKVTileBytes;
    const uint32_t vs = v_tiles + uint32_t(it & 1) * kKVTileBytes;
    const int64_t kt0 = k_lo + int64_t(it) * kFwdKeysPerTile;

    // S = Q K^T for 16*MT rows x 64 keys.
    float s[MT][kSTiles][4];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) s[mi][nt][0] = s[mi][nt][1] = s[mi][nt][2] = s[mi][nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSlices; ++kk) {
      uint32_t qa[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        if (kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[mi][e] = qf[kQInRegisters ? kk : 0][e];
        } else {
          ldmatrix_x4(qa[mi], q_tile + tile_offset<D>(warp * 16 * MT + mi * 16 + (lane % 16), kk * 2 + lane / 16));
        }
      }
#pragma unroll
      for (int np = 0; np < kSTiles / 2; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, ks + tile_offset<D>(np * 16 + (lane / 16) * 8 + (lane % 8), kk * 2 + (lane / 8) % 2));
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
          mma_bf16(s[mi][2 * np], qa[mi], kb[0], kb[1]);
          mma_bf16(s[mi][2 * np + 1], qa[mi], kb[2], kb[3]);
        }
      }
    }

    // Mask only tiles that cross the key-range end or the causal diagonal. In tile-local ints: key jj is
    // visible to local row lr iff jj < kmax and (not causal or jj - lr <= cd).
    const bool need_mask = kt0 + kFwdKeysPerTile > k_hi || (p.causal && kt0 + kFwdKeysPerTile - 1 > q0 + p.diag);
    if (need_mask) {
      const int kmax = int(min(k_hi - kt0, int64_t(kFwdKeysPerTile)));
      const int cd = p.causal ? int(max(min(q0 + p.diag - kt0, int64_t(1) << 20), -(int64_t(1) << 20))) : (1 << 20);
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int jj = nt * 8 + 2 * t + (e & 1);
            if (!(jj < kmax && jj - lrow[mi * 2 + e / 2] <= cd)) s[mi][nt][e] = -INFINITY;
          }
    }

    // Online softmax in the log2 domain: new running max, rescale of l and O.
    float muse[kRows];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int x = mi * 2 + r;
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * r], s[mi][nt][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(m_run[x], mx * p.scale2);
        muse[x] = mnew == -INFINITY ? 0.f : mnew;  // never (-inf) - (-inf)
        const float alpha = fast_exp2(m_run[x] - muse[x]);
        m_run[x] = mnew;
        l_run[x] *= alpha;
#pragma unroll
        for (int nt = 0; nt < kDTiles; ++nt) {
          o[mi][nt][2 * r] *= alpha;
          o[mi][nt][2 * r + 1] *= alpha;
        }
      }
    }

    // O += P V, one 16-key slice at a time: P of the slice becomes a bf16 A fragment right before its mma.
#pragma unroll
    for (int j = 0; j < kSTiles / 2; ++j) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int x = mi * 2 + r, nt = 2 * j + half;
            const float p0 = fast_exp2(fmaf(s[mi][nt][2 * r], p.scale2, -muse[x]));
            const float p1 = fast_exp2(fmaf(s[mi][nt][2 * r + 1], p.scale2, -muse[x]));
            l_run[x] += p0 + p1;
            pa[mi][half * 2 + r] = pack_bf16(p0, p1);
          }
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, vs + tile_offset<D>(j * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dp * 2 + lane / 16));
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
          mma_bf16(o[mi][2 * dp], pa[mi], vb[0], vb[1]);
          mma_bf16(o[mi][2 * dp + 1], pa[mi], vb[2], vb[3]);
        }
      }
    }
  }

  // Write the state back.
#pragma unroll
  for (int x = 0; x < kRows; ++x) {
    float lx = l_run[x];
    lx += __shfl_xor_sync(0xffffffffu, lx, 1);
    lx += __shfl_xor_sync(0xffffffffu, lx, 2);
    if (t == 0 && q0 + lrow[x] < p.q_end) {
      p.m[bh_row0 + q0 + lrow[x]] = m_run[x];
      p.l[bh_row0 + q0 + lrow[x]] = lx;
    }
  }
#pragma unroll
  for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int x = mi * 2 + r;
      if (q0 + lrow[x] >= p.q_end) continue;
      float* acc_row = p.acc + (bh_row0 + q0 + lrow[x]) * D;
#pragma unroll
      for (int nt = 0; nt < kDTiles; ++nt)
        *reinterpret_cast<float2*>(acc_row + nt * 8 + 2 * t) = make_float2(o[mi][nt][2 * r], o[mi][nt][2 * r + 1]);
    }
  }
}

template <int D, int MT, int WARPS>
void launch_fwd(AttnFwdParams p, int64_t B, int device, cudaStream_t stream) {
  constexpr int kBr = 16 * MT * WARPS;
  constexpr size_t smem = fwd_smem_bytes<D, kBr>();
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_kernel<D, MT, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    configured[device_slot(device)] = true;
  }
  const int64_t tiles = (p.q_end - p.q_begin + kBr - 1) / kBr;
  RT_CHECK(tiles <= 0x7fffffff, "attn_fwd_block: too many query rows (" << p.q_end - p.q_begin << ")");
  p.num_q_tiles = int(tiles);
  const dim3 grid(unsigned(p.num_q_tiles), unsigned(p.H), unsigned(B));
  attn_fwd_kernel<D, MT, WARPS><<<grid, WARPS * 32, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attn_fwd_mma_dev(int variant, const AttnFwdParams& p, int64_t D, int64_t B, int device,
                             cudaStream_t stream) {
  // Only v1 is instantiated here (v2 and v3 are kernels/cuda/attention/attn_fwd_sm80.cu's), to keep the lab's build
  // short.
  RT_CHECK(variant == 1, "fwd mma (dev): variant " << variant << ": this copy builds v1 only");
  RT_CHECK(D == 64 || D == 128, "fwd mma (dev): head dim " << D << " is not 64 or 128");
  if (D == 64) launch_fwd<64, 1, 8>(p, B, device, stream);
  else launch_fwd<128, 1, 8>(p, B, device, stream);
}

}  // namespace dev
}  // namespace cuda
}  // namespace rt
