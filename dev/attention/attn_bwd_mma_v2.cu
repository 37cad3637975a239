// dev/attention (built with -DRINGTRAIN_DEV_KERNELS=ON only; see README.md): the mma.sync backward with both
// CTA shapes it was measured with: v1 (NW = 8 warps, one CTA per SM) and v2 (NW = 4, two CTAs per SM).
// kernels/cuda/attention/attn_bwd_sm80.cu ships v1; v2 measured 7-9% slower at 4K+ rows on an H200.
// Entry: rt::cuda::dev::launch_attn_bwd_mma_dev(2, ...) (v2 only is instantiated), the contract of
// kernels/cuda/attention/attn_bwd_sm80.cu.
// attn_bwd_block on CUDA: gradients of one K/V block, recomputing P from the final LSE.
//   P = exp2(S*scale*log2e - lse*log2e), dP = dO V^T, dS = P (dP - delta),
//   dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K.
// Flash-attention-2 style, K/V-stationary, on mma.sync m16n8k16 (bf16 in, f32 accumulate):
//   * one CTA = 16*NW keys of one (batch, K/V head); NW warps, each owns 16 keys and keeps their dK and dV
//     in registers (f32) for the whole kernel;
//   * it loops over the query heads of its GQA group and over 64-row query tiles; Q, dO, lse and delta
//     tiles are double-buffered in shared memory with cp.async;
//   * each warp computes S^T and dP^T for its keys directly (K and V are the A operands), so P^T and dS^T
//     feed the dV / dK mma from registers;
//   * dS^T goes to shared memory once, and dQ = dS K is formed with 4 warps along the queries x NW/4 along D
//     and added to the f32 dq_acc with float2 atomics;
//   * causal: query tiles wholly before the key tile are never visited; only tiles that cross the
//     diagonal or a range end are masked.
// dk_acc / dv_acc rows are each owned by one CTA, so they are read-added-written without atomics.
// Deterministic mode (set_deterministic_attention(true) or RT_ATTN_DETERMINISTIC=1): the dQ adds of one
// 64-row query tile happen in key-tile order. The key tiles that visit a query tile are always a prefix
// 0..j of the grid's key tiles (q_first is non-decreasing in the key tile), so key tile j takes its turn
// when the tile's counter reads j: it spins on the counter, adds with plain loads and stores, fences, and
// hands the counter to j + 1. Key tile j - 1 of the same (batch, head) was launched before j (blockIdx.x
// varies fastest), so the wait always ends. Same bits on every run; the cost is measured in bench/NOTES.md.
#include "kernels/attention.h"
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_params.cuh"

namespace rt {
namespace cuda {
namespace dev {
namespace {

// NW warps per CTA, each owning 16 keys: Bc = 16 * NW keys per CTA (v1: NW = 8, one CTA per SM;
// v2: NW = 4, two CTAs per SM). RT_ATTN_BWD_VARIANT=2 selects v2 (7-9% slower at 4K+ on an H200,
// 2026-11-29). The default is v5 (wgmma, attn_bwd_sm90.cu) for D = 64 and 128 on compute capability 9.0
// with an sm_90a image, else v1; this mma.sync kernel stays the fallback and the oracle of the wgmma tests.
constexpr int kBwdRows = 64;              // Br

template <int D, int kBwdKeys>
constexpr size_t bwd_smem_bytes() {
  return size_t(2 * kBwdKeys + 4 * kBwdRows) * D * 2  // K, V, Q[2], dO[2]
         + size_t(kBwdKeys) * kBwdRows * 2            // dS^T
         + size_t(4) * kBwdRows * 4;                  // lse[2], delta[2]
}

template <int D, int NW>
__global__ void __launch_bounds__(NW * 32, NW == 4 ? 2 : 1) attn_bwd_kernel(const AttnBwdParams p) {
  constexpr int kBwdWarps = NW;
  constexpr int kBwdThreads = NW * 32;
  constexpr int kBwdKeys = 16 * NW;  // Bc
  constexpr int kKSlices = D / 16;
  constexpr int kDTiles = D / 8;
  constexpr int kQTiles = kBwdRows / 8;                 // n-tiles of S^T (queries)
  constexpr int kDqWarpsAlongD = kBwdWarps / (kBwdRows / 16);
  constexpr int kDqCols = D / kDqWarpsAlongD;           // D columns of dQ per warp
  constexpr int kDqTiles = kDqCols / 8;
  constexpr uint32_t kQTileBytes = kBwdRows * D * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t k_tile = smem_addr(smem);                        // (Bc, D) bf16
  const uint32_t v_tile = k_tile + kBwdKeys * D * 2;              // (Bc, D) bf16
  const uint32_t q_tiles = v_tile + kBwdKeys * D * 2;             // (2, Br, D) bf16
  const uint32_t do_tiles = q_tiles + 2 * kQTileBytes;            // (2, Br, D) bf16
  const uint32_t ds_tile = do_tiles + 2 * kQTileBytes;            // (Bc, Br) bf16, dS^T
  float* lse_s = reinterpret_cast<float*>(smem + (2 * kBwdKeys + 4 * kBwdRows) * D * 2 + kBwdKeys * kBwdRows * 2);
  float* delta_s = lse_s + 2 * kBwdRows;                          // (2, Br) each
  const uint32_t lse_addr = smem_addr(lse_s), delta_addr = smem_addr(delta_s);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t k0 = p.k_begin + int64_t(blockIdx.x) * kBwdKeys;
  const int64_t hk = blockIdx.y, b = blockIdx.z;

  // Query tiles this CTA visits: [q_first, q_end) in steps of Br, for each head of the group.
  const int64_t q_first = first_query_tile_row<kBwdRows>(p, k0);
  if (q_first >= p.q_end) return;  // no query sees these keys
  const int n_qt = int((p.q_end - q_first + kBwdRows - 1) / kBwdRows);
  const int n_iter = int(p.group) * n_qt;

  const int64_t kv_stride = p.Hkv * D, q_stride = p.H * D;
  const __nv_bfloat16* k_head = p.k + (b * p.Nk * p.Hkv + hk) * D;
  const __nv_bfloat16* v_head = p.v + (b * p.Nk * p.Hkv + hk) * D;
  load_tile_async<kBwdKeys, D, kBwdThreads>(k_tile, k_head, kv_stride, k0, p.k_end);
  load_tile_async<kBwdKeys, D, kBwdThreads>(v_tile, v_head, kv_stride, k0, p.k_end);

  // Issues the loads of iteration `it` into buffer it & 1.
  auto issue = [&](int it) {
    const int64_t h = hk * p.group + it / n_qt;
    const int64_t q0 = q_first + int64_t(it % n_qt) * kBwdRows;
    const uint32_t buf = uint32_t(it & 1);
    const int64_t head_off = (b * p.Nq * p.H + h) * D;
    load_tile_async<kBwdRows, D, kBwdThreads>(q_tiles + buf * kQTileBytes, p.q + head_off, q_stride, q0, p.q_end);
    load_tile_async<kBwdRows, D, kBwdThreads>(do_tiles + buf * kQTileBytes, p.dout + head_off, q_stride, q0, p.q_end);
    if (threadIdx.x < 2 * kBwdRows) {
      const int r = threadIdx.x % kBwdRows;
      const bool is_delta = threadIdx.x >= kBwdRows;
      const float* src = (is_delta ? p.delta : p.lse) + (b * p.H + h) * p.Nq;
      const bool ok = q0 + r < p.q_end;
      const uint32_t dst = (is_delta ? delta_addr : lse_addr) + (buf * kBwdRows + r) * 4;
      cp_async_4(dst, ok ? src + q0 + r : src, ok ? 4 : 0);
    }
    cp_async_commit();
  };
  issue(0);

  float dk[kDTiles][4], dv[kDTiles][4];  // (16 keys, D) of this warp, f32
#pragma unroll
  for (int nt = 0; nt < kDTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[nt][e] = dv[nt][e] = 0.f;

  const int64_t key_a = k0 + warp * 16 + g, key_b = key_a + 8;
  for (int it = 0; it < n_iter; ++it) {
    cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < n_iter) issue(it + 1);
    const int64_t h = hk * p.group + it / n_qt;
    const int64_t q0 = q_first + int64_t(it % n_qt) * kBwdRows;
    const uint32_t buf = uint32_t(it & 1);
    const uint32_t qs = q_tiles + buf * kQTileBytes, dos = do_tiles + buf * kQTileBytes;
    const float* lse_t = lse_s + buf * kBwdRows;      // (Br)
    const float* delta_t = delta_s + buf * kBwdRows;  // (Br)

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x 64 queries.
    float s[kQTiles][4], dp[kQTiles][4];
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kKSlices; ++kk) {
      uint32_t ka[4], va[4];
      ldmatrix_x4(ka, k_tile + tile_offset<D>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
      ldmatrix_x4(va, v_tile + tile_offset<D>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
      for (int np = 0; np < kQTiles / 2; ++np) {
        const int row = np * 16 + (lane / 16) * 8 + (lane % 8), chunk = kk * 2 + (lane / 8) % 2;
        uint32_t qb[4], ob[4];
        ldmatrix_x4(qb, qs + tile_offset<D>(row, chunk));
        ldmatrix_x4(ob, dos + tile_offset<D>(row, chunk));
        mma_bf16(s[2 * np], ka, qb[0], qb[1]);
        mma_bf16(s[2 * np + 1], ka, qb[2], qb[3]);
        mma_bf16(dp[2 * np], va, ob[0], ob[1]);
        mma_bf16(dp[2 * np + 1], va, ob[2], ob[3]);
      }
    }

    // P^T and dS^T (in place of s and dp).
    const bool need_mask = q0 + kBwdRows > p.q_end || k0 + kBwdKeys > p.k_end ||
                           (p.causal && k0 + kBwdKeys - 1 > q0 + p.diag);
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = nt * 8 + 2 * t + c;
        const float lse_raw = lse_t[col];
        const float lse2 = lse_raw == -INFINITY ? INFINITY : lse_raw * kLog2e;  // no visible key: P = 0
        const float dl = delta_t[col];
        const int64_t qi = q0 + col;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = r * 2 + c;
          float pv = fast_exp2(fmaf(s[nt][e], p.scale2, -lse2));
          if (need_mask) {
            const int64_t key = r ? key_b : key_a;
            const bool visible = qi < p.q_end && key < p.k_end && (!p.causal || key <= qi + p.diag);
            if (!visible) pv = 0.f;
          }
          s[nt][e] = pv;
          dp[nt][e] = pv * (dp[nt][e] - dl);
        }
      }
    }

    // dV += P^T dO and dK += dS^T Q (k-dim = queries, 16 per slice).
#pragma unroll
    for (int j = 0; j < kQTiles / 2; ++j) {
      const uint32_t pa[4] = {pack_bf16(s[2 * j][0], s[2 * j][1]), pack_bf16(s[2 * j][2], s[2 * j][3]),
                              pack_bf16(s[2 * j + 1][0], s[2 * j + 1][1]),
                              pack_bf16(s[2 * j + 1][2], s[2 * j + 1][3])};
      const uint32_t da[4] = {pack_bf16(dp[2 * j][0], dp[2 * j][1]), pack_bf16(dp[2 * j][2], dp[2 * j][3]),
                              pack_bf16(dp[2 * j + 1][0], dp[2 * j + 1][1]),
                              pack_bf16(dp[2 * j + 1][2], dp[2 * j + 1][3])};
#pragma unroll
      for (int dpair = 0; dpair < kDTiles / 2; ++dpair) {
        const int row = j * 16 + (lane % 8) + ((lane / 8) % 2) * 8, chunk = dpair * 2 + lane / 16;
        uint32_t ob[4], qb[4];
        ldmatrix_x4_trans(ob, dos + tile_offset<D>(row, chunk));
        ldmatrix_x4_trans(qb, qs + tile_offset<D>(row, chunk));
        mma_bf16(dv[2 * dpair], pa, ob[0], ob[1]);
        mma_bf16(dv[2 * dpair + 1], pa, ob[2], ob[3]);
        mma_bf16(dk[2 * dpair], da, qb[0], qb[1]);
        mma_bf16(dk[2 * dpair + 1], da, qb[2], qb[3]);
      }
    }

    // dS^T (keys x queries) to shared memory as bf16.
#pragma unroll
    for (int nt = 0; nt < kQTiles; ++nt) {
      const uint32_t a = ds_tile + tile_offset<kBwdRows>(warp * 16 + g, nt) + 4 * t;
      const uint32_t bb = ds_tile + tile_offset<kBwdRows>(warp * 16 + g + 8, nt) + 4 * t;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(pack_bf16(dp[nt][0], dp[nt][1])));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(bb), "r"(pack_bf16(dp[nt][2], dp[nt][3])));
    }
    __syncthreads();

    // dQ (64 queries x D) += scale * dS K: warp (mt, dh) owns queries mt*16.. and D columns dh*kDqCols..
    {
      const int mt = warp % (kBwdRows / 16), dh = warp / (kBwdRows / 16);
      float dq[kDqTiles][4];
#pragma unroll
      for (int nt = 0; nt < kDqTiles; ++nt) dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kBwdKeys / 16; ++ks) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, ds_tile + tile_offset<kBwdRows>(ks * 16 + (lane % 8) + (lane / 16) * 8, mt * 2 + (lane / 8) % 2));
#pragma unroll
        for (int dpair = 0; dpair < kDqTiles / 2; ++dpair) {
          uint32_t kb[4];
          ldmatrix_x4_trans(kb, k_tile + tile_offset<D>(ks * 16 + (lane % 8) + ((lane / 8) % 2) * 8,
                                                        dh * (kDqCols / 8) + dpair * 2 + lane / 16));
          mma_bf16(dq[2 * dpair], a, kb[0], kb[1]);
          mma_bf16(dq[2 * dpair + 1], a, kb[2], kb[3]);
        }
      }
      const int64_t qa = q0 + mt * 16 + g, qb = qa + 8;
      float* dq_a = p.dq + ((b * p.Nq + qa) * p.H + h) * D + dh * kDqCols;
      float* dq_b = p.dq + ((b * p.Nq + qb) * p.H + h) * D + dh * kDqCols;
      if (p.dq_turn == nullptr) {
#pragma unroll
        for (int nt = 0; nt < kDqTiles; ++nt) {
          const int col = nt * 8 + 2 * t;
          if (qa < p.q_end) atomic_add_f32x2(dq_a + col, dq[nt][0] * p.scale, dq[nt][1] * p.scale);
          if (qb < p.q_end) atomic_add_f32x2(dq_b + col, dq[nt][2] * p.scale, dq[nt][3] * p.scale);
        }
      } else {
        const int64_t n_tiles = (p.q_end - p.q_begin + kBwdRows - 1) / kBwdRows;
        int* turn = p.dq_turn + (b * p.H + h) * n_tiles + (q0 - p.q_begin) / kBwdRows;
        const int mine = int(blockIdx.x);
        dq_turn_wait(turn, mine);
#pragma unroll
        for (int nt = 0; nt < kDqTiles; ++nt) {
          const int col = nt * 8 + 2 * t;
          if (qa < p.q_end) ordered_add_f32x2(dq_a + col, dq[nt][0] * p.scale, dq[nt][1] * p.scale);
          if (qb < p.q_end) ordered_add_f32x2(dq_b + col, dq[nt][2] * p.scale, dq[nt][3] * p.scale);
        }
        dq_turn_pass(turn, mine);
      }
    }
  }

  // dK and dV rows of this CTA: read, add, write.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = r ? key_b : key_a;
    if (key >= p.k_end) continue;
    const int64_t off = ((b * p.Nk + key) * p.Hkv + hk) * D;
#pragma unroll
    for (int nt = 0; nt < kDTiles; ++nt) {
      const int col = nt * 8 + 2 * t;
      float2* pk = reinterpret_cast<float2*>(p.dk + off + col);
      float2* pv = reinterpret_cast<float2*>(p.dv + off + col);
      float2 a = *pk, c = *pv;
      a.x += dk[nt][r * 2] * p.scale;
      a.y += dk[nt][r * 2 + 1] * p.scale;
      c.x += dv[nt][r * 2];
      c.y += dv[nt][r * 2 + 1];
      *pk = a;
      *pv = c;
    }
  }
}

template <int D, int NW>
void launch_bwd(const AttnBwdParams& p, int64_t B, int device, cudaStream_t stream) {
  constexpr int kBwdKeys = 16 * NW;
  constexpr size_t smem = bwd_smem_bytes<D, kBwdKeys>();
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_kernel<D, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured[device_slot(device)] = true;
  }
  const int64_t tiles = (p.k_end - p.k_begin + kBwdKeys - 1) / kBwdKeys;
  RT_CHECK(tiles <= 0x7fffffff, "attn_bwd_block: too many key rows (" << p.k_end - p.k_begin << ")");
  const dim3 grid(unsigned(tiles), unsigned(p.Hkv), unsigned(B));
  attn_bwd_kernel<D, NW><<<grid, NW * 32, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_attn_bwd_mma_dev(int variant, const AttnBwdParams& p, int64_t D, int64_t B, int device,
                             cudaStream_t stream) {
  // Only v2 (NW = 4) is instantiated here (v1 is kernels/cuda/attention/attn_bwd_sm80.cu's), to keep the lab's build
  // short.
  RT_CHECK(variant == 2, "bwd mma (dev): variant " << variant << ": this copy builds v2 only");
  RT_CHECK(D == 64 || D == 128, "bwd mma (dev): head dim " << D << " is not 64 or 128");
  if (D == 64) launch_bwd<64, 4>(p, B, device, stream);
  else launch_bwd<128, 4>(p, B, device, stream);
}

}  // namespace dev
}  // namespace cuda
}  // namespace rt
