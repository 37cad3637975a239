// attn_fwd_block on Hopper (fwd v4, sm_90a): continues the fp32 online-softmax state (acc, m, l) with one
// K/V block using warpgroup MMA (wgmma). Same contract as the mma.sync kernels in attn_fwd_sm80.cu;
// attn_fwd_dispatch.cu dispatches here (variant 4, and fwd v5's fallback for small blocks) and keeps the mma.sync
// kernels as the fallback for other GPUs.
//   * one CTA = 128 query rows of one (batch, head) = 2 warpgroups x 64 rows, 256 threads, 1 CTA per SM;
//   * S = Q K^T: wgmma m64n128k16 with Q and K read from 128-byte-swizzled shared memory through matrix
//     descriptors (kernels/cuda/attention/attn_sm90_wgmma_ops.cuh); 128 keys per tile;
//   * online softmax on the S accumulator in registers: scores prescaled by scale*log2(e) inside the FFMA
//     feeding ex2, m kept in that log2 domain (as the mma.sync kernel);
//   * P is packed to bf16 in registers and is the register A operand of O += P V (wgmma m64n{D}k16), V read
//     MN-major (transpose bit) from the same swizzled layout, so no transposed copy of V is made;
//   * software pipeline inside each warpgroup: S_{j+1} = Q K_{j+1}^T and O += P_j V_j are issued back to
//     back; the softmax of S_{j+1} runs while P_j V_j is still on the tensor cores, and O is rescaled after;
//   * K/V tiles are double-buffered with cp.async by all 256 threads, one barrier per tile: the loads issued
//     at the top of step j (K_{j+2}, V_{j+1}) land during step j;
//   * causal: key tiles wholly above the diagonal are never visited; only tiles crossing the key-range end
//     or the diagonal of a warpgroup's rows are masked.
// Rows outside [q_begin, q_end) are left untouched; a row that sees no key keeps m = -inf, l = 0; acc is
// not read for rows whose m is -inf.
#include <climits>

#include "kernels/cuda/attention/attn_fwd_sm90.cuh"
#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgRowsPerCta, kWgKeysPerTile, issue_qk, issue_pv, softmax_tile, rescale_o, *_state_rows
constexpr int kWgThreads = 256;

template <int D>
struct WgFwdSmem {
  static constexpr uint32_t kQBytes = kWgRowsPerCta * D * 2;    // (128, D) bf16, sw128
  static constexpr uint32_t kKVBytes = kWgKeysPerTile * D * 2;  // (128, D) bf16, sw128
  static constexpr size_t kBytes = size_t(kQBytes) + 4 * size_t(kKVBytes) + 1024;  // Q, K[2], V[2], alignment
};

// kDocs: the document mask (p.docs) is on; a separate instantiation, so the unmasked kernel has none of its code.
template <int D, bool kDocs>
__global__ void __launch_bounds__(kWgThreads, 1) attn_fwd_wgmma_kernel(const AttnFwdParams p, int num_q_tiles) {
#if RT_WGMMA_AVAILABLE
  using Smem = WgFwdSmem<D>;
  constexpr int kBc = kWgKeysPerTile;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t q_tile = (smem_addr(smem_raw) + 1023u) & ~1023u;  // (128, D) bf16 sw128
  const uint32_t k_tiles = q_tile + Smem::kQBytes;                   // (2, 128, D) bf16 sw128
  const uint32_t v_tiles = k_tiles + 2 * Smem::kKVBytes;             // (2, 128, D) bf16 sw128

  const int wg = int(threadIdx.x) / 128, warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;  // accumulator fragment row group and thread-in-group
  const int tile = num_q_tiles - 1 - int(blockIdx.x);  // heaviest (causal) tiles first
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / p.group;
  const int64_t q0 = p.q_begin + int64_t(tile) * kWgRowsPerCta;
  const int64_t q_last = min(q0 + kWgRowsPerCta, p.q_end) - 1;

  // Keys this CTA visits: [k_lo, k_hi). Documents: the span of key tiles some row of this tile sees.
  int64_t k_lo = p.k_begin;
  int64_t k_hi = p.k_end;
  if (p.causal) k_hi = min(k_hi, q_last + p.diag + 1);
  if constexpr (kDocs) {
    __shared__ int doc_red[2];
    const int qt = int((q0 - p.q_begin) / kDocTileRows);
    const DocRange cta = doc_q_range(p.docs, b, qt, kWgRowsPerCta / kDocTileRows);
    if (!doc_key_span(p.docs, b, cta, p.k_begin, p.k_end, kWgThreads, doc_red, k_lo, k_hi)) return;
  }
  if (k_hi <= k_lo) return;  // no visible key: state untouched
  const int n_tiles = int((k_hi - k_lo + kBc - 1) / kBc);

  const int64_t q_stride = p.H * D, kv_stride = p.Hkv * D;  // elements between token rows
  const __nv_bfloat16* q_head = p.q + (b * p.Nq * p.H + h) * D;
  const __nv_bfloat16* k_head = p.k + (b * p.Nk * p.Hkv + hk) * D;
  const __nv_bfloat16* v_head = p.v + (b * p.Nk * p.Hkv + hk) * D;

  // Prologue loads: group 0 = Q and K_0, group 1 = V_0 and K_1.
  load_tile_sw128_async<kWgRowsPerCta, D, kWgThreads>(q_tile, q_head, q_stride, q0, p.q_end);
  load_tile_sw128_async<kBc, D, kWgThreads>(k_tiles, k_head, kv_stride, k_lo, k_hi);
  cp_async_commit();
  load_tile_sw128_async<kBc, D, kWgThreads>(v_tiles, v_head, kv_stride, k_lo, k_hi);
  if (n_tiles > 1) load_tile_sw128_async<kBc, D, kWgThreads>(k_tiles + Smem::kKVBytes, k_head, kv_stride, k_lo + kBc, k_hi);
  cp_async_commit();

  // This thread's rows: CTA-local lrow0 = wg*64 + warp*16 + g and lrow0 + 8.
  const int lrow0 = wg * 64 + warp * 16 + g;
  const int64_t bh_row0 = (b * p.H + h) * p.Nq;  // (B,H,Nq) index of row 0 of this head
  float m_run[2], l_run[2];  // l: per-thread partial sums, reduced across the quad at the end
  float o[D / 2];            // (64 rows, D) accumulator: o[nt*4 + 2r + e] = (row r, column nt*8 + 2t + e)
  load_state_rows<D>(p, q0 + lrow0, bh_row0, t, m_run, l_run, o);

  cp_async_wait<0>();
  fence_proxy_async_smem();
  __syncthreads();

  const uint32_t q_wg = q_tile + uint32_t(wg) * 64 * 128;  // this warpgroup's 64 rows in each column block
  float s[64];     // (64 rows, 128 keys) scores: s[nt*4 + 2r + e] = (row r, key nt*8 + 2t + e)
  uint32_t pf[32];  // P of the tile whose P V is pending, bf16 A fragments
  float alpha[2];
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.f;

  // Documents: this thread's rows, and the key summary of the tile after the one in flight (loaded a tile ahead).
  const FwdDocRows drows = fwd_doc_rows<kDocs>(p, b, q0, wg * 64, lrow0);
  FwdDocKeys dkeys = fwd_doc_keys<kDocs>(p, b, k_lo);

  // S_0 and its softmax.
  wgmma_fence_regs(s);
  wgmma_fence();
  issue_qk<D>(s, q_wg, k_tiles);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(s);
  softmax_tile<kDocs>(s, pf, alpha, m_run, l_run, p, k_lo, k_hi, q0, wg * 64, lrow0, t, drows, dkeys, b);
  rescale_o<D>(o, alpha);

  for (int j = 0; j + 1 < n_tiles; ++j) {
    // K_{j+1} and V_j have landed; every warpgroup is done with K_j (S_j) and V_{j-1} (P_{j-1} V_{j-1}).
    cp_async_wait<0>();
    fence_proxy_async_smem();
    __syncthreads();
    if (j + 2 < n_tiles)
      load_tile_sw128_async<kBc, D, kWgThreads>(k_tiles + uint32_t(j & 1) * Smem::kKVBytes, k_head, kv_stride,
                                                k_lo + int64_t(j + 2) * kBc, k_hi);
    load_tile_sw128_async<kBc, D, kWgThreads>(v_tiles + uint32_t((j + 1) & 1) * Smem::kKVBytes, v_head, kv_stride,
                                              k_lo + int64_t(j + 1) * kBc, k_hi);
    cp_async_commit();
    dkeys = fwd_doc_keys<kDocs>(p, b, k_lo + int64_t(j + 1) * kBc);

    wgmma_fence_regs(s);
    wgmma_fence_regs(o);
    fence_regs_u32(pf);
    wgmma_fence();
    issue_qk<D>(s, q_wg, k_tiles + uint32_t((j + 1) & 1) * Smem::kKVBytes);
    wgmma_commit();
    issue_pv<D>(o, pf, v_tiles + uint32_t(j & 1) * Smem::kKVBytes);
    wgmma_commit();

    wgmma_wait<1>();  // S_{j+1} is ready; P_j V_j may still run
    wgmma_fence_regs(s);
    uint32_t pn[32];
    softmax_tile<kDocs>(s, pn, alpha, m_run, l_run, p, k_lo + int64_t(j + 1) * kBc, k_hi, q0, wg * 64, lrow0, t,
                        drows, dkeys, b);
    wgmma_wait<0>();
    wgmma_fence_regs(o);
    fence_regs_u32(pf);
    rescale_o<D>(o, alpha);
#pragma unroll
    for (int i = 0; i < 32; ++i) pf[i] = pn[i];
  }

  // P V of the last tile.
  cp_async_wait<0>();
  fence_proxy_async_smem();
  __syncthreads();
  wgmma_fence_regs(o);
  fence_regs_u32(pf);
  wgmma_fence();
  issue_pv<D>(o, pf, v_tiles + uint32_t((n_tiles - 1) & 1) * Smem::kKVBytes);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(o);

  store_state_rows<D>(p, q0 + lrow0, bh_row0, t, m_run, l_run, o);
#else
  // Built without an sm_90a image: attn_fwd_wgmma_supported() refuses such binaries, so this never runs.
  __trap();
#endif
}

template <int D, bool kDocs>
void launch(const AttnFwdParams& p, int64_t B, int device, cudaStream_t stream) {
  constexpr size_t smem = WgFwdSmem<D>::kBytes;
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_wgmma_kernel<D, kDocs>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    configured[device_slot(device)] = true;
  }
  const int64_t tiles = (p.q_end - p.q_begin + kWgRowsPerCta - 1) / kWgRowsPerCta;
  RT_CHECK(tiles <= INT_MAX, "attn_fwd_block: too many query rows (" << p.q_end - p.q_begin << ")");
  const dim3 grid(unsigned(tiles), unsigned(p.H), unsigned(B));
  attn_fwd_wgmma_kernel<D, kDocs><<<grid, kWgThreads, smem, stream>>>(p, int(tiles));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attn_fwd_wgmma_supported(int device, int64_t D) {
  if (D != 64 && D != 128) return false;
  static int cached[kMaxDevices] = {};  // per device: 0 unknown, 1 supported, 2 not
  int& c = cached[device_slot(device)];
  if (c == 0) {
    const bool ok = wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_fwd_wgmma_kernel<128, false>));
    c = ok ? 1 : 2;
  }
  return c == 1;
}

void launch_attn_fwd_wgmma(const AttnFwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream) {
  RT_CHECK(D == 64 || D == 128, "attn_fwd_block (wgmma): head dim " << D << " is not 64 or 128");
  if (p.docs.on) D == 64 ? launch<64, true>(p, B, device, stream) : launch<128, true>(p, B, device, stream);
  else D == 64 ? launch<64, false>(p, B, device, stream) : launch<128, false>(p, B, device, stream);
}

}  // namespace cuda
}  // namespace rt
