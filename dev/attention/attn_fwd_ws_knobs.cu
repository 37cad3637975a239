// dev/attention (built with -DRINGTRAIN_DEV_KERNELS=ON only; see README.md): fwd v5 with the two knobs it was
// measured with, a 3-stage K/V ring and the pingpong order of the consumers' MMAs.
// kernels/cuda/attention/attn_fwd_sm90ws.cu ships 2 stages without pingpong (3 stages lost up to 3%, pingpong -5% to
// +1% on an H200). Entry: rt::cuda::dev::launch_attn_fwd_ws_knobs(..., stages, pingpong).
// attn_fwd_block on Hopper, warp-specialized (fwd v5, sm_90a): continues the fp32 online-softmax state
// (acc, m, l) with one K/V block. Same contract as fwd v4 (attn_fwd_sm90.cu) and the mma.sync kernels
// (attn_fwd_block.cu, which dispatches here).
//   * one CTA = 128 query rows of one (batch, head), 384 threads = 3 warpgroups, 1 CTA per SM:
//       - warpgroup 0, the producer: setmaxnreg.dec to 24; one thread loads Q once and the K/V tiles (128
//         keys) with TMA into a ring of STAGES (2) stages, K and V with separate full/empty mbarriers;
//       - warpgroups 1 and 2, the consumers (setmaxnreg.inc to 240): 64 query rows each, the S = Q K^T /
//         softmax / O += P V pipeline of fwd v4 (attn_fwd_sm90_tile.cuh): S_{j+1} and P_j V_j are issued
//         back to back and the softmax of S_{j+1} runs while P_j V_j is on the tensor cores;
//   * optional pingpong (PINGPONG, off by default: measured no faster): the two consumers take turns issuing
//     their MMAs (named barriers 1 and 2), so one warpgroup's softmax overlaps the other's GEMMs; without it
//     the warp schedulers interleave the two warpgroups freely; no CTA-wide barrier after the start;
//   * a consumer releases K_j (empty barrier) as soon as S_j is done and V_j once P_j V_j is done;
//   * TMA boxes: Q rows past q_end and K/V rows past k_end read as zero (the tensor maps' row extents end
//     there); keys at or past the CTA's last visible key in a tile are masked in the softmax.
//   * causal: key tiles wholly above the diagonal are never visited; heaviest query tiles launch first.
// Rows outside [q_begin, q_end) are left untouched; a row that sees no key keeps m = -inf, l = 0; acc is
// not read for rows whose m is -inf.
#include <climits>

#include "kernels/cuda/attention/attn_fwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_tma_ops.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace dev {
namespace {

using namespace wgfwd;  // kWgRowsPerCta (128), kWgKeysPerTile (128), issue_qk, issue_pv, softmax_tile, rescale_o,
                        // load_state_rows, store_state_rows, fresh_state_rows, store_final_rows

constexpr int kWsThreads = 384;        // producer warpgroup + 2 consumer warpgroups
constexpr int kWsProducerRegs = 24;    // 24 * 128 + 240 * 256 <= 64K registers
constexpr int kWsConsumerRegs = 240;
constexpr int kBarTurn0 = 1;           // named barriers 1, 2: consumer warpgroup 0's / 1's turn to issue MMAs
constexpr int kEmptyArrivals = 256;    // every consumer thread (a lane-0-only arrival, branch or predicate,
                                       // makes ptxas serialize the wgmma pipeline: C7513)

template <int D, int STAGES>
struct WsSmem {
  static constexpr uint32_t kQBytes = kWgRowsPerCta * D * 2;    // (128, D) bf16, sw128
  static constexpr uint32_t kKVBytes = kWgKeysPerTile * D * 2;  // (128, D) bf16, sw128
  static constexpr uint32_t kBarBytes = 1024;                   // mbarriers: q_full, k/v full/empty per stage
  static constexpr size_t kBytes = 1024 + kBarBytes + size_t(kQBytes) + 2 * STAGES * size_t(kKVBytes);
  static_assert(8 + 32 * STAGES <= kBarBytes, "mbarriers do not fit");
};

template <int STAGES>
struct WsBars {
  uint32_t base;  // 8-byte mbarriers: q_full, k_full[S], v_full[S], k_empty[S], v_empty[S]
  __device__ __forceinline__ uint32_t q_full() const { return base; }
  __device__ __forceinline__ uint32_t k_full(int s) const { return base + 8 + 8 * s; }
  __device__ __forceinline__ uint32_t v_full(int s) const { return base + 8 + 8 * (STAGES + s); }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return base + 8 + 8 * (2 * STAGES + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return base + 8 + 8 * (3 * STAGES + s); }
};

// Loads one (128, D) sw128 tile: D/64 boxes of (128 rows, 64 columns) at element coordinates
// (column, head, row, batch).
template <int D>
__device__ __forceinline__ void tma_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar, int head, int row,
                                         int batch) {
#pragma unroll
  for (int c = 0; c < D / 64; ++c) tma_load_4d(dst + uint32_t(c) * (128 * 128), map, bar, c * 64, head, row, batch);
}

template <int D, int STAGES, bool PINGPONG>
__global__ void __launch_bounds__(kWsThreads, 1)
    attn_fwd_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const AttnFwdParams p, int num_q_tiles) {
#if RT_WGMMA_AVAILABLE
  using Smem = WsSmem<D, STAGES>;
  constexpr int kBc = kWgKeysPerTile;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const WsBars<STAGES> bars{base};
  const uint32_t q_tile = base + Smem::kBarBytes;          // (128, D) bf16 sw128
  const uint32_t k_tiles = q_tile + Smem::kQBytes;         // (STAGES, 128, D) bf16 sw128
  const uint32_t v_tiles = k_tiles + STAGES * Smem::kKVBytes;  // (STAGES, 128, D) bf16 sw128

  const int tile = num_q_tiles - 1 - int(blockIdx.x);  // heaviest (causal) tiles first
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const int64_t q0 = p.q_begin + int64_t(tile) * kWgRowsPerCta;
  const int64_t q_last = min(q0 + kWgRowsPerCta, p.q_end) - 1;
  // Keys this CTA visits: [k_lo, k_hi).
  const int64_t k_lo = p.k_begin;
  int64_t k_hi = p.k_end;
  if (p.causal) k_hi = min(k_hi, q_last + p.diag + 1);
  if (k_hi <= k_lo) {  // no visible key: state untouched (the whole CTA leaves before any barrier)
    if (p.out != nullptr) {  // finalized: O = 0, lse = -inf for the tile's rows
      const int rows = int(q_last - q0 + 1);
      for (int i = int(threadIdx.x); i < rows * D; i += kWsThreads)
        p.out[((b * p.Nq + q0 + i / D) * p.H + h) * D + i % D] = __float2bfloat16(0.f);
      for (int i = int(threadIdx.x); i < rows; i += kWsThreads) p.lse[(b * p.H + h) * p.Nq + q0 + i] = -INFINITY;
    }
    return;
  }
  const int n_tiles = int((k_hi - k_lo + kBc - 1) / kBc);

  if (threadIdx.x == 0) {
    mbar_init(bars.q_full(), 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars.k_full(s), 1);
      mbar_init(bars.v_full(s), 1);
      mbar_init(bars.k_empty(s), kEmptyArrivals);
      mbar_init(bars.v_empty(s), kEmptyArrivals);
    }
    mbar_init_fence();
  }
  __syncthreads();

  // Through a shuffle, so the compiler knows wg is warp-uniform (addresses derived from it stay in uniform
  // registers).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 0) {
    // ---- producer ----
    setmaxnreg_dec<kWsProducerRegs>();
    if (threadIdx.x == 0) {
      const int hq = int(h), hk = int(h / p.group), bb = int(b), k0 = int(k_lo);
      tma_prefetch_desc(&tm_q);
      tma_prefetch_desc(&tm_k);
      tma_prefetch_desc(&tm_v);
      mbar_arrive_expect_tx(bars.q_full(), Smem::kQBytes);
      tma_tile<D>(q_tile, &tm_q, bars.q_full(), hq, int(q0), bb);
      mbar_arrive_expect_tx(bars.k_full(0), Smem::kKVBytes);
      tma_tile<D>(k_tiles, &tm_k, bars.k_full(0), hk, k0, bb);
      // K_{j+1} ahead of V_j: S_{j+1} and P_j V_j are issued together.
      for (int j = 0; j < n_tiles; ++j) {
        const int j1 = j + 1;
        if (j1 < n_tiles) {
          const int s = j1 % STAGES;
          if (j1 >= STAGES) mbar_wait(bars.k_empty(s), uint32_t((j1 / STAGES - 1) & 1));
          mbar_arrive_expect_tx(bars.k_full(s), Smem::kKVBytes);
          tma_tile<D>(k_tiles + uint32_t(s) * Smem::kKVBytes, &tm_k, bars.k_full(s), hk, k0 + j1 * kBc, bb);
        }
        const int s = j % STAGES;
        if (j >= STAGES) mbar_wait(bars.v_empty(s), uint32_t((j / STAGES - 1) & 1));
        mbar_arrive_expect_tx(bars.v_full(s), Smem::kKVBytes);
        tma_tile<D>(v_tiles + uint32_t(s) * Smem::kKVBytes, &tm_v, bars.v_full(s), hk, k0 + j * kBc, bb);
      }
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<kWsConsumerRegs>();
  const int cw = wg - 1;  // consumer warpgroup 0 or 1: rows cw*64 .. cw*64+63 of the tile
  const int warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;  // accumulator fragment row group and thread-in-group
  const int lrow0 = cw * 64 + warp * 16 + g;  // this thread's rows: lrow0 and lrow0 + 8 of the tile
  const int64_t bh_row0 = (b * p.H + h) * p.Nq;  // (B,H,Nq) index of row 0 of this head
  float m_run[2], l_run[2];  // l: per-thread partial sums, reduced across the quad at the end
  float o[D / 2];            // (64 rows, D) accumulator: o[nt*4 + 2r + e] = (row r, column nt*8 + 2t + e)
  if (p.fresh) fresh_state_rows<D>(m_run, l_run, o);
  else load_state_rows<D>(p, q0 + lrow0, bh_row0, t, m_run, l_run, o);

  // Turns: S_0, then one per pipeline step, then the last P V (n_tiles + 1 each). Consumer 0 goes first;
  // consumer 1 hands the turn back after each of its turns but the last (no arrival is left pending).
  const int my_turn = kBarTurn0 + cw, other_turn = kBarTurn0 + (1 - cw);
  if (PINGPONG && cw == 1) named_bar_arrive(other_turn, 256);

  const uint32_t q_wg = q_tile + uint32_t(cw) * 64 * 128;  // this warpgroup's 64 rows in each column block
  float s[64];      // (64 rows, 128 keys) scores: s[nt*4 + 2r + e] = (row r, key nt*8 + 2t + e)
  uint32_t pf[32];  // P of the tile whose P V is pending, bf16 A fragments
  float alpha[2];
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.f;

  // S_0 and its softmax.
  mbar_wait(bars.q_full(), 0);
  mbar_wait(bars.k_full(0), 0);
  if (PINGPONG) named_bar_sync(my_turn, 256);
  wgmma_fence_regs(s);
  wgmma_fence();
  issue_qk<D>(s, q_wg, k_tiles);
  wgmma_commit();
  if (PINGPONG) named_bar_arrive(other_turn, 256);
  wgmma_wait<0>();
  wgmma_fence_regs(s);
  mbar_arrive(bars.k_empty(0));
  // The lab's variants take no document mask (kDocs = false).
  softmax_tile<false>(s, pf, alpha, m_run, l_run, p, k_lo, k_hi, q0, cw * 64, lrow0, t, FwdDocRows{}, FwdDocKeys{},
                      b);
  rescale_o<D>(o, alpha);

  for (int j = 0; j + 1 < n_tiles; ++j) {
    const int s1 = (j + 1) % STAGES, s0 = j % STAGES;
    mbar_wait(bars.k_full(s1), uint32_t(((j + 1) / STAGES) & 1));
    mbar_wait(bars.v_full(s0), uint32_t((j / STAGES) & 1));
    if (PINGPONG) named_bar_sync(my_turn, 256);
    wgmma_fence_regs(s);
    wgmma_fence_regs(o);
    fence_regs_u32(pf);
    wgmma_fence();
    issue_qk<D>(s, q_wg, k_tiles + uint32_t(s1) * Smem::kKVBytes);
    wgmma_commit();
    issue_pv<D>(o, pf, v_tiles + uint32_t(s0) * Smem::kKVBytes);
    wgmma_commit();
    if (PINGPONG) named_bar_arrive(other_turn, 256);

    wgmma_wait<1>();  // S_{j+1} is ready; P_j V_j may still run
    wgmma_fence_regs(s);
    mbar_arrive(bars.k_empty(s1));
    uint32_t pn[32];
    softmax_tile<false>(s, pn, alpha, m_run, l_run, p, k_lo + int64_t(j + 1) * kBc, k_hi, q0, cw * 64, lrow0, t,
                        FwdDocRows{}, FwdDocKeys{}, b);
    wgmma_wait<0>();
    wgmma_fence_regs(o);
    fence_regs_u32(pf);
    mbar_arrive(bars.v_empty(s0));
    rescale_o<D>(o, alpha);
#pragma unroll
    for (int i = 0; i < 32; ++i) pf[i] = pn[i];
  }

  // P V of the last tile.
  {
    const int sl = (n_tiles - 1) % STAGES;
    mbar_wait(bars.v_full(sl), uint32_t(((n_tiles - 1) / STAGES) & 1));
    if (PINGPONG) named_bar_sync(my_turn, 256);
    wgmma_fence_regs(o);
    fence_regs_u32(pf);
    wgmma_fence();
    issue_pv<D>(o, pf, v_tiles + uint32_t(sl) * Smem::kKVBytes);
    wgmma_commit();
    if (PINGPONG && cw == 0) named_bar_arrive(other_turn, 256);
    wgmma_wait<0>();
    wgmma_fence_regs(o);
  }

  if (p.out != nullptr) store_final_rows<D>(p, q0 + lrow0, b, h, t, m_run, l_run, o);
  else store_state_rows<D>(p, q0 + lrow0, bh_row0, t, m_run, l_run, o);
#else
  // Built without an sm_90a image: attn_fwd_ws_supported() refuses such binaries, so this never runs.
  __trap();
#endif
}

template <int D, int STAGES, bool PINGPONG>
void launch(const AttnFwdParams& p, int64_t B, int device, cudaStream_t stream) {
  constexpr size_t smem = WsSmem<D, STAGES>::kBytes;
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_ws_kernel<D, STAGES, PINGPONG>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured[device_slot(device)] = true;
  }
  const int64_t tiles = (p.q_end - p.q_begin + kWgRowsPerCta - 1) / kWgRowsPerCta;
  RT_CHECK(tiles <= INT_MAX, "attn_fwd_block: too many query rows (" << p.q_end - p.q_begin << ")");
  RT_CHECK(p.q_end <= INT_MAX && p.k_end <= INT_MAX && p.H <= INT_MAX,
           "attn_fwd_block (ws): TMA coordinates are 32-bit; Nq = " << p.Nq << ", Nk = " << p.Nk);
  const CUtensorMap tq = make_rows_heads_tma_map(p.q, B, p.Nq, p.q_end, p.H, D, kWgRowsPerCta);
  const CUtensorMap tk = make_rows_heads_tma_map(p.k, B, p.Nk, p.k_end, p.Hkv, D, kWgKeysPerTile);
  const CUtensorMap tv = make_rows_heads_tma_map(p.v, B, p.Nk, p.k_end, p.Hkv, D, kWgKeysPerTile);
  const dim3 grid(unsigned(tiles), unsigned(p.H), unsigned(B));
  attn_fwd_ws_kernel<D, STAGES, PINGPONG><<<grid, kWsThreads, smem, stream>>>(tq, tk, tv, p, int(tiles));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// stages 2 | 3, pingpong on | off, except 2 stages without pingpong (that is kernels/cuda/attention/attn_fwd_sm90ws.cu,
// not instantiated again here). Blocks under 128 rows: call kernels/cuda's fwd v4 instead (no fallback here).
void launch_attn_fwd_ws_knobs(const AttnFwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream,
                              int stages, bool pingpong) {
  RT_CHECK(D == 64 || D == 128, "fwd ws (dev): head dim " << D << " is not 64 or 128");
  RT_CHECK((stages == 2 && pingpong) || stages == 3,
           "fwd ws (dev): stages " << stages << (pingpong ? " with" : " without")
                                   << " pingpong: the knobs built here are 2 with pingpong, and 3");
  RT_CHECK(p.q_end >= kWgRowsPerCta && p.k_end >= kWgKeysPerTile, "fwd ws (dev): blocks under 128 rows run fwd v4");
  if (D == 64) {
    if (stages == 2) launch<64, 2, true>(p, B, device, stream);
    else pingpong ? launch<64, 3, true>(p, B, device, stream) : launch<64, 3, false>(p, B, device, stream);
  } else {
    if (stages == 2) launch<128, 2, true>(p, B, device, stream);
    else pingpong ? launch<128, 3, true>(p, B, device, stream) : launch<128, 3, false>(p, B, device, stream);
  }
}

}  // namespace dev
}  // namespace cuda
}  // namespace rt
