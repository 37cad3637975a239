// attn_fwd_block on CUDA: continues the fp32 online-softmax state (acc, m, l) with one K/V block.
// Flash-attention-2 style kernel on mma.sync m16n8k16 (bf16 in, f32 accumulate):
//   * one CTA = 128 query rows of one (batch, head); 8 warps, each owns 16 rows;
//   * Q is loaded once (cp.async -> shared -> ldmatrix -> registers);
//   * K/V tiles of 64 keys are double-buffered in shared memory with cp.async, so the next tile's
//     load overlaps this tile's math;
//   * scores are prescaled by scale*log2(e) inside one FFMA feeding ex2; m is kept in that log2 domain;
//   * causal: key tiles wholly above the diagonal are never visited, and only tiles that cross the
//     diagonal or the key-range end are masked;
//   * the state is read at the start and written at the end, so the kernel resumes across ring steps.
// Rows outside [q_begin, q_end) are left untouched; a row that sees no key keeps m = -inf, l = 0.
#include "kernels/cuda/attention_common.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kFwdRowsPerCta = 128;  // Br
constexpr int kFwdKeysPerTile = 64;  // Bc
constexpr int kFwdWarps = 8;
constexpr int kFwdThreads = kFwdWarps * 32;

struct FwdParams {
  const __nv_bfloat16* q;  // (B,Nq,H,D)
  const __nv_bfloat16* k;  // (B,Nk,Hkv,D)
  const __nv_bfloat16* v;  // (B,Nk,Hkv,D)
  float* acc;              // (B,H,Nq,D)
  float* m;                // (B,H,Nq)
  float* l;                // (B,H,Nq)
  int64_t Nq, Nk, H, Hkv, group;
  int64_t q_begin, q_end, k_begin, k_end;
  int64_t diag;  // key j is visible to query i iff j <= i + diag (causal); diag = q_offset - k_offset
  bool causal;
  float scale2;  // log2(e) / sqrt(D)
  int num_q_tiles;
};

template <int D>
constexpr size_t fwd_smem_bytes() {
  return size_t(kFwdRowsPerCta + 4 * kFwdKeysPerTile) * D * 2;  // Q + K[2] + V[2]
}

template <int D>
__global__ void __launch_bounds__(kFwdThreads, D == 64 ? 2 : 1) attn_fwd_kernel(const FwdParams p) {
  constexpr int kKSlices = D / 16;   // k-steps of the QK^T mma
  constexpr int kDTiles = D / 8;     // n-tiles of the output
  constexpr int kSTiles = kFwdKeysPerTile / 8;  // n-tiles of the scores
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
  load_tile_async<kFwdRowsPerCta, D, kFwdThreads>(q_tile, q_head, q_stride, q0, p.q_end);
  cp_async_commit();
  load_tile_async<kFwdKeysPerTile, D, kFwdThreads>(k_tiles, k_head, kv_stride, k_lo, k_hi);
  load_tile_async<kFwdKeysPerTile, D, kFwdThreads>(v_tiles, v_head, kv_stride, k_lo, k_hi);
  cp_async_commit();

  // This thread's two rows and their state.
  const int64_t row_a = q0 + warp * 16 + g, row_b = row_a + 8;
  const bool ok_a = row_a < p.q_end, ok_b = row_b < p.q_end;
  const int64_t bh_row0 = (b * p.H + h) * p.Nq;  // (B,H,Nq) index of row 0 of this head
  float m_a = ok_a ? p.m[bh_row0 + row_a] : -INFINITY;
  float m_b = ok_b ? p.m[bh_row0 + row_b] : -INFINITY;
  float l_a = (ok_a && t == 0) ? p.l[bh_row0 + row_a] : 0.f;  // per-thread partial sums, reduced at the end
  float l_b = (ok_b && t == 0) ? p.l[bh_row0 + row_b] : 0.f;
  float o[kDTiles][4];  // (16 rows, D) accumulator fragments
  {
    const float* acc_a = p.acc + (bh_row0 + row_a) * D;
    const float* acc_b = p.acc + (bh_row0 + row_b) * D;
#pragma unroll
    for (int nt = 0; nt < kDTiles; ++nt) {
      const int col = nt * 8 + 2 * t;
      const float2 va = ok_a ? *reinterpret_cast<const float2*>(acc_a + col) : make_float2(0.f, 0.f);
      const float2 vb = ok_b ? *reinterpret_cast<const float2*>(acc_b + col) : make_float2(0.f, 0.f);
      o[nt][0] = va.x; o[nt][1] = va.y; o[nt][2] = vb.x; o[nt][3] = vb.y;
    }
  }

  uint32_t qf[kKSlices][4];  // Q fragments of this warp's 16 rows
  cp_async_wait<1>();  // the Q group has landed (the first K/V group may still be in flight)
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < kKSlices; ++kk)
    ldmatrix_x4(qf[kk], q_tile + tile_offset<D>(warp * 16 + (lane % 16), kk * 2 + lane / 16));

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < n_tiles) {  // prefetch the next K/V tile into the other buffer
      const uint32_t buf = uint32_t((it + 1) & 1) * kKVTileBytes;
      const int64_t next = k_lo + int64_t(it + 1) * kFwdKeysPerTile;
      load_tile_async<kFwdKeysPerTile, D, kFwdThreads>(k_tiles + buf, k_head, kv_stride, next, k_hi);
      load_tile_async<kFwdKeysPerTile, D, kFwdThreads>(v_tiles + buf, v_head, kv_stride, next, k_hi);
      cp_async_commit();
    }
    const uint32_t ks = k_tiles + uint32_t(it & 1) * kKVTileBytes;
    const uint32_t vs = v_tiles + uint32_t(it & 1) * kKVTileBytes;
    const int64_t kt0 = k_lo + int64_t(it) * kFwdKeysPerTile;

    // S = Q K^T for 16 rows x 64 keys.
    float s[kSTiles][4];
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSlices; ++kk) {
#pragma unroll
      for (int np = 0; np < kSTiles / 2; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, ks + tile_offset<D>(np * 16 + (lane / 16) * 8 + (lane % 8), kk * 2 + (lane / 8) % 2));
        mma_bf16(s[2 * np], qf[kk], kb[0], kb[1]);
        mma_bf16(s[2 * np + 1], qf[kk], kb[2], kb[3]);
      }
    }

    // Mask only tiles that cross the key-range end or the causal diagonal.
    const bool need_mask = kt0 + kFwdKeysPerTile > k_hi || (p.causal && kt0 + kFwdKeysPerTile - 1 > q0 + p.diag);
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < kSTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = kt0 + nt * 8 + 2 * t + (e & 1);
          const int64_t i = (e < 2) ? row_a : row_b;
          const bool visible = j < k_hi && (!p.causal || j <= i + p.diag);
          if (!visible) s[nt][e] = -INFINITY;
        }
      }
    }

    // Online softmax in the log2 domain.
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
    const float mnew_a = fmaxf(m_a, mx_a * p.scale2), mnew_b = fmaxf(m_b, mx_b * p.scale2);
    const float muse_a = mnew_a == -INFINITY ? 0.f : mnew_a;  // never (-inf) - (-inf)
    const float muse_b = mnew_b == -INFINITY ? 0.f : mnew_b;
    const float alpha_a = fast_exp2(m_a - muse_a), alpha_b = fast_exp2(m_b - muse_b);
    m_a = mnew_a;
    m_b = mnew_b;
    l_a *= alpha_a;
    l_b *= alpha_b;
#pragma unroll
    for (int nt = 0; nt < kDTiles; ++nt) {
      o[nt][0] *= alpha_a; o[nt][1] *= alpha_a;
      o[nt][2] *= alpha_b; o[nt][3] *= alpha_b;
    }
    uint32_t pa[kSTiles / 2][4];  // P as bf16 A fragments, one per 16-key slice
#pragma unroll
    for (int nt = 0; nt < kSTiles; ++nt) {
      const float p0 = fast_exp2(fmaf(s[nt][0], p.scale2, -muse_a));
      const float p1 = fast_exp2(fmaf(s[nt][1], p.scale2, -muse_a));
      const float p2 = fast_exp2(fmaf(s[nt][2], p.scale2, -muse_b));
      const float p3 = fast_exp2(fmaf(s[nt][3], p.scale2, -muse_b));
      l_a += p0 + p1;
      l_b += p2 + p3;
      pa[nt / 2][(nt % 2) * 2 + 0] = pack_bf16(p0, p1);
      pa[nt / 2][(nt % 2) * 2 + 1] = pack_bf16(p2, p3);
    }

    // O += P V.
#pragma unroll
    for (int j = 0; j < kSTiles / 2; ++j) {
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, vs + tile_offset<D>(j * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dp * 2 + lane / 16));
        mma_bf16(o[2 * dp], pa[j], vb[0], vb[1]);
        mma_bf16(o[2 * dp + 1], pa[j], vb[2], vb[3]);
      }
    }
  }

  // Write the state back.
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  if (t == 0) {
    if (ok_a) { p.m[bh_row0 + row_a] = m_a; p.l[bh_row0 + row_a] = l_a; }
    if (ok_b) { p.m[bh_row0 + row_b] = m_b; p.l[bh_row0 + row_b] = l_b; }
  }
  float* acc_a = p.acc + (bh_row0 + row_a) * D;
  float* acc_b = p.acc + (bh_row0 + row_b) * D;
#pragma unroll
  for (int nt = 0; nt < kDTiles; ++nt) {
    const int col = nt * 8 + 2 * t;
    if (ok_a) *reinterpret_cast<float2*>(acc_a + col) = make_float2(o[nt][0], o[nt][1]);
    if (ok_b) *reinterpret_cast<float2*>(acc_b + col) = make_float2(o[nt][2], o[nt][3]);
  }
}

template <int D>
void launch_fwd(const FwdParams& p, int64_t B, int device, cudaStream_t stream) {
  constexpr size_t smem = fwd_smem_bytes<D>();
  static bool configured[16] = {};  // the shared-memory opt-in is per device
  if (!configured[device & 15]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured[device & 15] = true;
  }
  const dim3 grid(unsigned(p.num_q_tiles), unsigned(p.H), unsigned(B));
  attn_fwd_kernel<D><<<grid, kFwdThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attn_fwd_block(const Tensor& q, const Tensor& k, const Tensor& v, AttnState& state, const AttnMask& mask) {
  const char* op = "attn_fwd_block";
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_dims(q, k, v, op);
  require_attn_tensor(state.acc, DType::f32, q.device, op, "state.acc");
  require_dtype_on(state.m, DType::f32, q.device, op, "state.m");
  require_dtype_on(state.l, DType::f32, q.device, op, "state.l");
  check_shape(state.acc, {d.B, d.H, d.Nq, d.D}, op, "state.acc (B,H,Nq,D)");
  check_shape(state.m, {d.B, d.H, d.Nq}, op, "state.m (B,H,Nq)");
  check_shape(state.l, {d.B, d.H, d.Nq}, op, "state.l (B,H,Nq)");
  const AttnRanges r = attn_ranges(mask, d.Nq, d.Nk, op);
  if (r.q_begin == r.q_end || r.k_begin == r.k_end || d.B == 0 || d.H == 0) return;

  FwdParams p;
  p.q = q.ptr<__nv_bfloat16>();
  p.k = k.ptr<__nv_bfloat16>();
  p.v = v.ptr<__nv_bfloat16>();
  p.acc = state.acc.ptr<float>();
  p.m = state.m.ptr<float>();
  p.l = state.l.ptr<float>();
  p.Nq = d.Nq; p.Nk = d.Nk; p.H = d.H; p.Hkv = d.Hkv; p.group = d.group;
  p.q_begin = r.q_begin; p.q_end = r.q_end; p.k_begin = r.k_begin; p.k_end = r.k_end;
  p.diag = mask.q_offset - mask.k_offset;
  p.causal = mask.causal;
  p.scale2 = float(1.0 / std::sqrt(double(d.D))) * kLog2e;
  const int64_t tiles = (r.q_end - r.q_begin + kFwdRowsPerCta - 1) / kFwdRowsPerCta;
  RT_CHECK(tiles <= 0x7fffffff, op << ": too many query rows (" << r.q_end - r.q_begin << ")");
  p.num_q_tiles = int(tiles);
  if (d.D == 64) launch_fwd<64>(p, d.B, q.device.index, stream);
  else launch_fwd<128>(p, d.B, q.device.index, stream);
}

}  // namespace cuda
}  // namespace rt
