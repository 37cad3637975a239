// attn_fwd_block on Hopper, warp-specialized (fwd v5, sm_90a): continues the fp32 online-softmax state
// (acc, m, l) with one K/V block. Same contract as fwd v4 (attn_fwd_wgmma.cu) and the mma.sync kernels
// (attn_fwd_mma.cu); attn_fwd_dispatch.cu chooses it.
//   * one CTA = 64 x kCons query rows of one (batch, head), chosen per call (fwd_ws_rows_for): kCons = 1 (64 rows,
//     256 threads, 2 CTAs per SM) for D = 64 calls without documents under 4K query rows; 3 (192 rows, 512 threads)
//     for D = 64 calls without documents of at least 4K query rows that fill the SMs as well; else 2 (128 rows, 384
//     threads), 1 CTA per SM:
//       - warpgroup 0, the producer: setmaxnreg.dec to 24; one thread loads Q once and the K/V tiles (128
//         keys) with TMA into a ring of kStages (2; 1 for 64-row tiles at D = 128) stages, K and V with separate
//         full/empty mbarriers;
//       - warpgroups 1 .. kCons, the consumers (setmaxnreg.inc to 160, 232 or 240): 64 query rows each, the S = Q K^T
//         / softmax / O += P V steps of wgmma_attn_fwd_tile.cuh: S_{j+1} and P_j V_j are issued back to back;
//         with 1 or 2 warpgroups the softmax of S_{j+1} goes into a second P fragment (ptxas puts the wait for P_j V_j
//         ahead of it all the same, and forcing the overlap measured 1-2% slower: bench/NOTES.md "fwd v5: the
//         softmax back under P V"), with 3 it waits for both MMAs and writes P_{j+1} over P_j;
//   * the warp schedulers interleave the consumer warpgroups freely, one's softmax under the others' MMAs (a
//     pingpong order measured no faster: dev/attention/README.md); no CTA-wide barrier after the start;
//   * a consumer releases K_{j+1} once S_{j+1} is done and V_j once P_j V_j is done;
//   * TMA boxes: Q rows past q_end and K/V rows past k_end read as zero (the tensor maps' row extents end
//     there); keys at or past the CTA's last visible key in a tile are masked in the softmax.
//   * causal: key tiles wholly above the diagonal are never visited; heaviest query tiles launch first;
//   * launched as a dependent kernel (pdl.cuh): its CTAs take the SMs the previous kernel's tail leaves free.
// Rows outside [q_begin, q_end) are left untouched (by the plain block form; the fresh and finalized forms of
// attn_fwd_fused.cu write them: no_key_rows); a row that sees no key keeps m = -inf, l = 0; acc is
// not read for rows whose m is -inf.
#include <climits>

#include "kernels/cuda/attention/attn_fwd_ws.cuh"
#include "kernels/cuda/attention/attn_variant.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/attention/tma_ops.cuh"
#include "kernels/cuda/attention/wgmma_attn_fwd.cuh"
#include "kernels/cuda/attention/wgmma_attn_fwd_tile.cuh"
#include "kernels/cuda/attention/wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgfwd;  // kWgRowsPerCta (128), kWgKeysPerTile (128), issue_qk, issue_pv, softmax_tile, rescale_o,
                        // load_state_rows, store_state_rows, fresh_state_rows, store_final_rows

// Consumer warpgroups per CTA (64 query rows each): 3 (192 rows, FA4's tile at D = 64: a third warpgroup to
// interleave with, at the same MMA per exp) only at D = 64 without documents (fwd_ws_rows_for), else 2 or 1: at D = 128
// the accumulator and the scores take 128 of a thread's registers, more than a third warpgroup would leave, and
// the document kernel's per-row state does not fit 160 registers.
template <int kCons>
constexpr int kWsThreads = 128 * (kCons + 1);  // producer warpgroup + the consumers
constexpr int kWsProducerRegs = 24;
// kCons = 1 (64-row tiles: D = 64 calls under 4K query rows, or forced; bench/NOTES.md "fwd v5: 64-query tiles")
// runs two CTAs per SM: 2 x (24 + 232) x 128 registers = 64K.
template <int kCons>
constexpr int kWsConsumerRegs = kCons == 3 ? 160 : kCons == 2 ? 240 : 232;  // 24 * 128 + 160 * 384 <= 64K, etc.
template <int kCons>
constexpr int kWsCtasPerSm = kCons == 1 ? 2 : 1;
// K/V ring stages: 2 (D = 128: 32 + 4 x 32 KB of shared memory; D = 64: 24 + 4 x 16 KB); 3 measured no faster
// (dev/attention/README.md). 64-row tiles at D = 128 take 1, so that two CTAs fit an SM (2 x 82 KB).
template <int D, int kCons>
constexpr int kWsStages = (kCons == 1 && D == 128) ? 1 : 2;
// The empty barriers count every consumer thread (a lane-0-only arrival, branch or predicate, makes ptxas
// serialize the wgmma pipeline: C7513).

template <int D, int kRows, int kStages>
struct WsSmem {
  static constexpr uint32_t kQBytes = kRows * D * 2;            // (kRows, D) bf16, sw128
  static constexpr uint32_t kKVBytes = kWgKeysPerTile * D * 2;  // (128, D) bf16, sw128
  static constexpr uint32_t kBarBytes = 1024;                   // mbarriers: q_full, k/v full/empty per stage
  static constexpr uint32_t kKeyPosBytes = 1024;                // (kStages, 128) u32: documents, the keys' positions
  static constexpr size_t kBytes =
      1024 + kBarBytes + kKeyPosBytes + size_t(kQBytes) + 2 * kStages * size_t(kKVBytes);
  static_assert(8 + 32 * kStages <= kBarBytes, "mbarriers do not fit");
  static_assert(kStages * kWgKeysPerTile * 4 <= kKeyPosBytes, "key positions do not fit");
};

template <int kStages>
struct WsBars {
  uint32_t base;  // 8-byte mbarriers: q_full, k_full[S], v_full[S], k_empty[S], v_empty[S]
  __device__ __forceinline__ uint32_t q_full() const { return base; }
  __device__ __forceinline__ uint32_t k_full(int s) const { return base + 8 + 8 * s; }
  __device__ __forceinline__ uint32_t v_full(int s) const { return base + 8 + 8 * (kStages + s); }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return base + 8 + 8 * (2 * kStages + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return base + 8 + 8 * (3 * kStages + s); }
};

// Loads one (kRows, D) sw128 tile: D/64 boxes of (kRows rows, 64 columns) at element coordinates
// (column, head, row, batch).
template <int D, int kRows = 128>
__device__ __forceinline__ void tma_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar, int head, int row,
                                         int batch) {
#pragma unroll
  for (int c = 0; c < D / 64; ++c) tma_load_4d(dst + uint32_t(c) * (kRows * 128), map, bar, c * 64, head, row, batch);
}

// The query tiles of the rows outside [q_begin, q_end): ceil(q_begin / 128) tiles before the range, then those
// after it up to Nq.
__host__ __device__ inline int outside_tiles(const AttnFwdParams& p) {
  return int((p.q_begin + kWgRowsPerCta - 1) / kWgRowsPerCta +
             (p.Nq - p.q_end + kWgRowsPerCta - 1) / kWgRowsPerCta);
}
__device__ __forceinline__ void outside_tile_rows(const AttnFwdParams& p, int f, int64_t& r0, int64_t& r1) {
  const int before = int((p.q_begin + kWgRowsPerCta - 1) / kWgRowsPerCta);
  if (f < before) {
    r0 = int64_t(f) * kWgRowsPerCta;
    r1 = min(r0 + kWgRowsPerCta, p.q_begin);
  } else {
    r0 = p.q_end + int64_t(f - before) * kWgRowsPerCta;
    r1 = min(r0 + kWgRowsPerCta, p.Nq);
  }
}

// Rows [r0, r1) of head h, batch b that no key of this call reaches, as the call's form leaves them:
//   plain block (state in, state out): untouched;
//   fresh, state out (attn_fwd_block_first): the reset state, acc = 0, m = -inf, l = 0;
//   fresh, finalized (attn_fwd_whole): O = 0, lse = -inf;
//   state in, finalized (attn_fwd_block_last): O and lse from the state, as attn_fwd_finalize computes them
//   (O * (1 / l), 0 where l == 0; lse = (m + log2 l) ln 2, -inf where l == 0).
// All threads of the CTA take part, 4 columns per thread and item; the reads of kBatch items are issued before
// any of their writes (one memory round trip per batch, not per item).
template <int D>
__device__ void no_key_rows(const AttnFwdParams& p, int64_t b, int64_t h, int64_t r0, int64_t r1) {
  if (!p.fresh && p.out == nullptr) return;
  constexpr int kVecs = D / 4;                   // float4 per row
  constexpr int kBatch = 8;
  const int64_t bh_row0 = (b * p.H + h) * p.Nq;  // (B,H,Nq) index of row 0 of this head
  const int n = int(r1 - r0) * kVecs, stride = int(blockDim.x);
  for (int i0 = int(threadIdx.x); i0 < n; i0 += kBatch * stride) {
    if (p.out == nullptr) {  // fresh state
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * stride;
        if (i >= n) break;
        const int64_t row = bh_row0 + r0 + i / kVecs;
        const int c = (i % kVecs) * 4;
        *reinterpret_cast<float4*>(p.acc + row * D + c) = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c == 0) {
          p.m[row] = -INFINITY;
          p.l[row] = 0.f;
        }
      }
      continue;
    }
    float4 a[kBatch];
    float lx[kBatch], mx[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {  // reads (acc is used only where l > 0)
      const int i = i0 + u * stride;
      lx[u] = 0.f;
      mx[u] = 0.f;
      a[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (i < n && !p.fresh) {
        const int64_t row = bh_row0 + r0 + i / kVecs;
        lx[u] = p.l[row];
        mx[u] = p.m[row];
        a[u] = *reinterpret_cast<const float4*>(p.acc + row * D + (i % kVecs) * 4);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {  // writes
      const int i = i0 + u * stride;
      if (i >= n) break;
      const int64_t row = r0 + i / kVecs;
      const int c = (i % kVecs) * 4;
      const bool seen = lx[u] > 0.f;
      const float inv = seen ? 1.f / lx[u] : 0.f;
      const float4 o = seen ? make_float4(a[u].x * inv, a[u].y * inv, a[u].z * inv, a[u].w * inv)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
      uint2 packed;
      packed.x = pack_bf16(o.x, o.y);
      packed.y = pack_bf16(o.z, o.w);
      *reinterpret_cast<uint2*>(p.out + ((b * p.Nq + row) * p.H + h) * D + c) = packed;
      if (c == 0) p.lse[bh_row0 + row] = seen ? (mx[u] + log2f(lx[u])) * kLn2 : -INFINITY;
    }
  }
}

// Documents: warp 1 of the producer warpgroup (idle otherwise) writes, per key tile j of the CTA, the low 32 bits of
// its 128 keys' positions into stage j % kStages of key_pos ((kStages, 128) u32 in shared memory; keys past k_end
// repeat the last key, the softmax masks them by index), then each lane arrives on the stage's K-full barrier, so
// a consumer's wait for K_j also covers them. Tile j overwrites tile j - kStages's positions only once that tile's
// V is released (after its P V, so after its softmax read them). The element mask then reads shared memory, not
// 32 dependent global loads per thread on the softmax's critical path (bench/NOTES.md "key positions in shared
// memory").
template <int kStages>
__device__ __forceinline__ void key_positions_warp(const AttnFwdParams& p, int64_t b, int64_t k_lo,
                                                   const unsigned short* live, int n_tiles,
                                                   const WsBars<kStages>& bars, uint32_t* key_pos, int lane) {
  const int64_t* k_pos = p.docs.k_pos + b * p.docs.k_stride;
#pragma unroll 1
  for (int j = 0; j < n_tiles; ++j) {
    const int s = j % kStages;
    if (j >= kStages) mbar_wait(bars.v_empty(s), uint32_t((j / kStages - 1) & 1));
    const int64_t k0 = k_lo + int64_t(live != nullptr ? live[j] : j) * kWgKeysPerTile;  // the CTA's j-th tile
    uint32_t w[kWgKeysPerTile / 32];
#pragma unroll
    for (int i = 0; i < kWgKeysPerTile / 32; ++i) w[i] = uint32_t(k_pos[min(k0 + lane + 32 * i, p.k_end - 1)]);
#pragma unroll
    for (int i = 0; i < kWgKeysPerTile / 32; ++i) key_pos[s * kWgKeysPerTile + lane + 32 * i] = w[i];
    mbar_arrive(bars.k_full(s));
  }
}

// kDocs: the document mask (p.docs) is on; a separate instantiation, so the unmasked kernel has none of its code.
template <int D, bool kDocs, int kCons>
__global__ void __launch_bounds__(kWsThreads<kCons>, kWsCtasPerSm<kCons>)
    attn_fwd_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_k2,
                       const __grid_constant__ CUtensorMap tm_v2, const AttnFwdParams p, int num_q_tiles) {
#if RT_WGMMA_AVAILABLE
  constexpr int kRows = 64 * kCons;  // query rows per CTA
  constexpr int kStages = kWsStages<D, kCons>;
  using Smem = WsSmem<D, kRows, kStages>;
  constexpr int kBc = kWgKeysPerTile;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const WsBars<kStages> bars{base};
  // Documents: (kStages, 128) u32, the low word of each key's position of the stage's tile (key_positions_warp).
  uint32_t* key_pos = reinterpret_cast<uint32_t*>(smem_raw + (base - smem_addr(smem_raw)) + Smem::kBarBytes);
  const uint32_t q_tile = base + Smem::kBarBytes + Smem::kKeyPosBytes;  // (kRows, D) bf16 sw128
  const uint32_t k_tiles = q_tile + Smem::kQBytes;         // (kStages, 128, D) bf16 sw128
  const uint32_t v_tiles = k_tiles + kStages * Smem::kKVBytes;  // (kStages, 128, D) bf16 sw128

  const int64_t h = blockIdx.y, b = blockIdx.z;
  grid_dependency_wait();  // launched as a dependent kernel (pdl.cuh): no global access before this
  allow_dependent_launch();
  // The fresh and finalized forms' tiles of the rows outside [q_begin, q_end) come first: short CTAs that then
  // run side by side on every SM (after the query tiles, they queued on the few SMs a one-wave step leaves free).
  const int outside = int(gridDim.x) - num_q_tiles;
  if (int(blockIdx.x) < outside) {
    int64_t r0, r1;
    outside_tile_rows(p, int(blockIdx.x), r0, r1);
    no_key_rows<D>(p, b, h, r0, r1);
    return;
  }
  int tile = num_q_tiles - 1 - (int(blockIdx.x) - outside);  // heaviest (causal) tiles first
  int64_t k_lo = p.k_begin;  // keys this CTA visits: [k_lo, k_hi)
  int64_t k_hi = p.k_end;
  if constexpr (kDocs) {
    // Documents: each head's tiles in the order of attn_doc_q128_order (most key tiles first; the heads one after
    // another, as the grid dispatches them, so that the SMs at work share a head's K/V in L2: a slot-major order
    // over the heads measured 15-20% slower on whole calls); the tile's key span was found once per call (not by
    // a scan of every key summary in each CTA).
    tile = p.docs.q128_order[b * num_q_tiles + (int(blockIdx.x) - outside)];
    const int2 span = p.docs.q128_span[b * num_q_tiles + tile];
    if (span.x > span.y) {
      k_hi = k_lo;
    } else {
      // Two key sources: the CTA's 128-key tiles start at a multiple of 128 (k2_row is one), so that no tile holds
      // rows of both sources; the 64 keys this may add before the span are invisible to the tile and masked.
      const int first = p.k2_row > 0 ? span.x & ~1 : span.x;
      k_lo = p.k_begin + int64_t(first) * kDocTileRows;
      k_hi = min(p.k_end, p.k_begin + int64_t(span.y + 1) * kDocTileRows);
    }
  }
  const int64_t q0 = p.q_begin + int64_t(tile) * kRows;
  const int64_t q_last = min(q0 + kRows, p.q_end) - 1;
  if (p.causal) k_hi = min(k_hi, q_last + p.diag + 1);
  int n_tiles = k_hi > k_lo ? int((k_hi - k_lo + kBc - 1) / kBc) : 0;
  const unsigned short* live = nullptr;  // documents: the span's tiles some row may see (doc_live_key_tiles)
  if constexpr (kDocs) {
    // A tile of several runs of rows (documents) lists the span's tiles they may see; one run needs no list, but
    // with two key sources its span may reach from its own keys to the second source's past every key between.
    __shared__ DocLiveScratch live_scratch;
    if (n_tiles > 1 && n_tiles <= kDocLiveMax && (p.docs.q128_nruns[b * num_q_tiles + tile] > 1 || p.k2_row > 0)) {
      n_tiles = doc_live_key_tiles<kWsThreads<kCons>>(p.docs, b, tile, p.k_begin, k_lo, n_tiles, live_scratch);
      live = live_scratch.list;
    }
  }
  if (n_tiles == 0) {  // no visible key (the whole CTA leaves before any barrier)
    no_key_rows<D>(p, b, h, q0, q_last + 1);
    return;
  }
  // The key row of the CTA's j-th tile: the span's j-th, or with documents its j-th live one.
  auto key_tile = [&](int j) { return k_lo + int64_t(live != nullptr ? live[j] : j) * kBc; };

  if (threadIdx.x == 0) {
    mbar_init(bars.q_full(), 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bars.k_full(s), kDocs ? 1 + 32 : 1);  // documents: + the key-position warp's lanes
      mbar_init(bars.v_full(s), 1);
      mbar_init(bars.k_empty(s), 128 * kCons);
      mbar_init(bars.v_empty(s), 128 * kCons);
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
      const int hq = int(h), hk = int(h / p.group), bb = int(b);
      tma_prefetch_desc(&tm_q);
      tma_prefetch_desc(&tm_k);
      tma_prefetch_desc(&tm_v);
      // Two key sources (documents only, attn_fwd_whole_two_kv): a tile at or past k2_row is the second's.
      const bool two = kDocs && p.k2_row > 0;
      if (two) {
        tma_prefetch_desc(&tm_k2);
        tma_prefetch_desc(&tm_v2);
      }
      auto load_kv = [&](uint32_t dst, bool is_v, uint32_t bar, int64_t row) {
        const bool second = two && row >= p.k2_row;
        const CUtensorMap* map = second ? (is_v ? &tm_v2 : &tm_k2) : (is_v ? &tm_v : &tm_k);
        tma_tile<D>(dst, map, bar, hk, int(second ? row - p.k2_row : row), bb);
      };
      mbar_arrive_expect_tx(bars.q_full(), Smem::kQBytes);
      tma_tile<D, kRows>(q_tile, &tm_q, bars.q_full(), hq, int(q0), bb);
      mbar_arrive_expect_tx(bars.k_full(0), Smem::kKVBytes);
      load_kv(k_tiles, false, bars.k_full(0), key_tile(0));
      // K_{j+1} ahead of V_j: S_{j+1} and P_j V_j are issued together.
      for (int j = 0; j < n_tiles; ++j) {
        const int j1 = j + 1;
        if (j1 < n_tiles) {
          const int s = j1 % kStages;
          if (j1 >= kStages) mbar_wait(bars.k_empty(s), uint32_t((j1 / kStages - 1) & 1));
          mbar_arrive_expect_tx(bars.k_full(s), Smem::kKVBytes);
          load_kv(k_tiles + uint32_t(s) * Smem::kKVBytes, false, bars.k_full(s), key_tile(j1));
        }
        const int s = j % kStages;
        if (j >= kStages) mbar_wait(bars.v_empty(s), uint32_t((j / kStages - 1) & 1));
        mbar_arrive_expect_tx(bars.v_full(s), Smem::kKVBytes);
        load_kv(v_tiles + uint32_t(s) * Smem::kKVBytes, true, bars.v_full(s), key_tile(j));
      }
    } else if (kDocs && threadIdx.x / 32 == 1) {
      key_positions_warp<kStages>(p, b, k_lo, live, n_tiles, bars, key_pos, int(threadIdx.x) % 32);
    }
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<kWsConsumerRegs<kCons>>();
  const int cw = wg - 1;  // consumer warpgroup 0 .. kCons-1: rows cw*64 .. cw*64+63 of the tile
  const int warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;  // accumulator fragment row group and thread-in-group
  const int lrow0 = cw * 64 + warp * 16 + g;  // this thread's rows: lrow0 and lrow0 + 8 of the tile
  const int64_t bh_row0 = (b * p.H + h) * p.Nq;  // (B,H,Nq) index of row 0 of this head
  float m_run[2], l_run[2];  // l: per-thread partial sums, reduced across the quad at the end
  float o[D / 2];            // (64 rows, D) accumulator: o[nt*4 + 2r + e] = (row r, column nt*8 + 2t + e)
  if (p.fresh) fresh_state_rows<D>(m_run, l_run, o);
  else load_state_rows<D>(p, q0 + lrow0, bh_row0, t, m_run, l_run, o);

  const uint32_t q_wg = q_tile + uint32_t(cw) * 64 * 128;  // this warpgroup's 64 rows in each column block
  float s[64];      // (64 rows, 128 keys) scores: s[nt*4 + 2r + e] = (row r, key nt*8 + 2t + e)
  uint32_t pf[32];  // P of the tile whose P V is pending, bf16 A fragments
  float alpha[2];
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.f;

  // Documents: this thread's rows, and the key summary of the tile after the one in flight (loaded a tile ahead).
  const FwdDocRows drows = fwd_doc_rows<kDocs>(p, b, q0, cw * 64, lrow0);
  FwdDocKeys dkeys = fwd_doc_keys<kDocs>(p, b, key_tile(0));

  // S_0 and its softmax.
  mbar_wait(bars.q_full(), 0);
  mbar_wait(bars.k_full(0), 0);
  wgmma_fence_regs(s);
  wgmma_fence();
  issue_qk<D, kRows>(s, q_wg, k_tiles);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_regs(s);
  mbar_arrive(bars.k_empty(0));
  softmax_tile<kDocs, true>(s, pf, alpha, m_run, l_run, p, key_tile(0), k_hi, q0, cw * 64, lrow0, t, drows, dkeys, b,
                            key_pos);
  rescale_o<D>(o, alpha);

  for (int j = 0; j + 1 < n_tiles; ++j) {
    const int s1 = (j + 1) % kStages, s0 = j % kStages;
    const int64_t kt1 = key_tile(j + 1);
    dkeys = fwd_doc_keys<kDocs>(p, b, kt1);
    mbar_wait(bars.k_full(s1), uint32_t(((j + 1) / kStages) & 1));
    mbar_wait(bars.v_full(s0), uint32_t((j / kStages) & 1));
    wgmma_fence_regs(s);
    wgmma_fence_regs(o);
    fence_regs_u32(pf);
    wgmma_fence();
    issue_qk<D, kRows>(s, q_wg, k_tiles + uint32_t(s1) * Smem::kKVBytes);
    wgmma_commit();
    issue_pv<D>(o, pf, v_tiles + uint32_t(s0) * Smem::kKVBytes);
    wgmma_commit();

    if constexpr (kCons <= 2) {
      // Two P fragments: the softmax of S_{j+1} into pn may start before P_j V_j is done (ptxas puts that wait
      // ahead of the softmax anyway; the one-fragment loop below measured 1-2% slower at D = 128).
      wgmma_wait<1>();  // S_{j+1} is ready; P_j V_j may still run
      wgmma_fence_regs(s);
      mbar_arrive(bars.k_empty(s1));
      uint32_t pn[32];
      softmax_tile<kDocs, true>(s, pn, alpha, m_run, l_run, p, kt1, k_hi, q0, cw * 64,
                                lrow0, t, drows, dkeys, b, key_pos + s1 * kBc);
      wgmma_wait<0>();
      wgmma_fence_regs(o);
      fence_regs_u32(pf);
      mbar_arrive(bars.v_empty(s0));
      rescale_o<D>(o, alpha);
#pragma unroll
      for (int i = 0; i < 32; ++i) pf[i] = pn[i];
    } else {
      // One P fragment, to fit 160 registers: both MMAs are waited for, then the softmax writes P_{j+1} over P_j
      // (the other two warpgroups' MMAs run during this one's softmax).
      wgmma_wait<0>();
      wgmma_fence_regs(s);
      wgmma_fence_regs(o);
      fence_regs_u32(pf);
      mbar_arrive(bars.k_empty(s1));
      mbar_arrive(bars.v_empty(s0));
      softmax_tile<kDocs, true>(s, pf, alpha, m_run, l_run, p, kt1, k_hi, q0, cw * 64,
                                lrow0, t, drows, dkeys, b, key_pos + s1 * kBc);
      rescale_o<D>(o, alpha);
    }
  }

  // P V of the last tile.
  {
    const int sl = (n_tiles - 1) % kStages;
    mbar_wait(bars.v_full(sl), uint32_t(((n_tiles - 1) / kStages) & 1));
    wgmma_fence_regs(o);
    fence_regs_u32(pf);
    wgmma_fence();
    issue_pv<D>(o, pf, v_tiles + uint32_t(sl) * Smem::kKVBytes);
    wgmma_commit();
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

template <int D, bool kDocs, int kCons>
void launch(const AttnFwdParams& p, int64_t B, int device, cudaStream_t stream) {
  static_assert(kCons == 2 || (!kDocs && (kCons == 1 || D == 64)),
                "fwd v5: three consumer warpgroups only at D = 64; one or three only without documents");
  constexpr int kRows = 64 * kCons;
  constexpr size_t smem = WsSmem<D, kRows, kWsStages<D, kCons>>::kBytes;
  static bool configured[kMaxDevices] = {};  // the shared-memory opt-in is per device
  if (!configured[device_slot(device)]) {
    CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_ws_kernel<D, kDocs, kCons>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    configured[device_slot(device)] = true;
  }
  const int64_t tiles = (p.q_end - p.q_begin + kRows - 1) / kRows;
  RT_CHECK(tiles <= INT_MAX, "attn_fwd_block: too many query rows (" << p.q_end - p.q_begin << ")");
  RT_CHECK(p.q_end <= INT_MAX && p.k_end <= INT_MAX && p.H <= INT_MAX,
           "attn_fwd_block (ws): TMA coordinates are 32-bit; Nq = " << p.Nq << ", Nk = " << p.Nk);
  const CUtensorMap tq = make_rows_heads_tma_map(p.q, B, p.Nq, p.q_end, p.H, D, kRows);
  // Two key sources (p.k2_row > 0, documents only): the first map ends at its own rows, the second holds the rest.
  const bool two = kDocs && p.k2_row > 0;
  const int64_t k1_end = two ? p.Nk : p.k_end, n2 = p.k_end - p.k2_row;
  RT_CHECK(!two || (p.k2_row % kWgKeysPerTile == 0 && p.k2_row >= p.Nk && p.Nk >= kWgKeysPerTile &&
                    n2 >= kWgKeysPerTile && p.k2 != nullptr && p.v2 != nullptr),
           "attn_fwd_ws: two key sources need k2_row a multiple of " << kWgKeysPerTile << " at or past Nk = " << p.Nk
                                                                   << " and both sources >= " << kWgKeysPerTile
                                                                   << " rows (k2_row = " << p.k2_row << ")");
  const CUtensorMap tk = make_rows_heads_tma_map(p.k, B, p.Nk, k1_end, p.Hkv, D, kWgKeysPerTile);
  const CUtensorMap tv = make_rows_heads_tma_map(p.v, B, p.Nk, k1_end, p.Hkv, D, kWgKeysPerTile);
  const CUtensorMap tk2 = two ? make_rows_heads_tma_map(p.k2, B, n2, n2, p.Hkv, D, kWgKeysPerTile) : tk;
  const CUtensorMap tv2 = two ? make_rows_heads_tma_map(p.v2, B, n2, n2, p.Hkv, D, kWgKeysPerTile) : tv;
  // The fresh and finalized forms also own the rows outside [q_begin, q_end): extra CTAs before the query tiles.
  if constexpr (kDocs) attn_doc_q128_order(p.docs, B, p.q_begin, p.q_end, stream);  // spans, runs, launch order
  const int64_t extra = (p.fresh || p.out != nullptr) ? outside_tiles(p) : 0;
  RT_CHECK(tiles + extra <= INT_MAX, "attn_fwd_block: too many query rows (" << p.Nq << ")");
  const dim3 grid(unsigned(tiles + extra), unsigned(p.H), unsigned(B));
  launch_dependent_kernel(attn_fwd_ws_kernel<D, kDocs, kCons>, grid, dim3(kWsThreads<kCons>), smem, stream, tq, tk,
                          tv, tk2, tv2, p, int(tiles));
}

}  // namespace

bool attn_fwd_ws_supported(int device, int64_t D) {
  if (D != 64 && D != 128) return false;
  static int cached[kMaxDevices] = {};  // per device: 0 unknown, 1 supported, 2 not
  int& c = cached[device_slot(device)];
  if (c == 0) {
    const bool ok = wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_fwd_ws_kernel<128, false, 2>));
    c = ok ? 1 : 2;
  }
  return c == 1;
}

// Query rows per CTA (bench/NOTES.md "fwd v5: 192-query tiles" and "fwd v5: 64-query tiles"), without
// documents (they keep 128):
//   * D = 64, fewer than 4K query rows: 64 (two CTAs per SM; the ring's 1-2K-row steps and 1K-row calls ran 7-9%
//     faster than with 128);
//   * D = 64, at least 4K query rows: 192 where 192-row CTAs fill the SMs about as well as 128-row ones (they run
//     ~10% faster per row at 4K-64K), else 128;
//   * D = 128: 128 (64-row tiles measured 0-2% slower in the 16K ring steps, 5-14% in whole calls of 4K-64K).
// The override forces 64 or 128 anywhere and 192 at D = 64 where the TMA box fits (q_end >= 192).
int fwd_ws_rows_for(int64_t D, bool docs, int64_t q_begin, int64_t q_end, int64_t B, int64_t H, int64_t n_sm,
                    int forced) {
  if (docs) return 128;
  if (forced == 64 || forced == 128) return forced;
  if (D != 64) return 128;
  if (forced == 192) return q_end >= 192 ? 192 : 128;
  const int64_t q = q_end - q_begin;
  if (q < 4096) return 64;
  const int64_t bh = H * B;
  const int64_t waves128 = ((q + 127) / 128 * bh + n_sm - 1) / n_sm;
  const int64_t waves192 = ((q + 191) / 192 * bh + n_sm - 1) / n_sm;
  return waves192 * 192 * 10 <= waves128 * 128 * 11 ? 192 : 128;
}

namespace {
int fwd_ws_rows(const AttnFwdParams& p, int64_t D, int64_t B) {
  // The SM count of the current device (stream_for in the op).
  return fwd_ws_rows_for(D, p.docs.on, p.q_begin, p.q_end, B, p.H, device_props().multiProcessorCount,
                         attn_variant_override().fwd_rows);
}
}  // namespace

void launch_attn_fwd_ws(const AttnFwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream) {
  RT_CHECK(D == 64 || D == 128, "attn_fwd_block (ws): head dim " << D << " is not 64 or 128");
  // A TMA box (the CTA's query rows, 128 keys) must not be longer than the tensor map's row extent (q_end,
  // k_end): such tiny blocks run fwd v4 (cp.async with zero-fill), which has the same contract and the same
  // requirements.
  RT_CHECK(p.k2_row == 0 || p.docs.on, "attn_fwd_block (ws): two key sources only with the document mask");
  if (p.q_end < kWgRowsPerCta || p.k_end < kWgKeysPerTile) {
    RT_CHECK(p.k2_row == 0, "attn_fwd_block (ws): two key sources need q_end and k_end >= 128");
    RT_CHECK(!p.fresh && p.out == nullptr, "attn_fwd_block (ws): a fused call (fresh state or finalized output) "
                                           "needs q_end and k_end >= 128; fwd v4 has no fused form");
    launch_attn_fwd_wgmma(p, D, B, device, stream);
    return;
  }
  if (p.docs.on) D == 64 ? launch<64, true, 2>(p, B, device, stream) : launch<128, true, 2>(p, B, device, stream);
  else {
    const int rows = fwd_ws_rows(p, D, B);
    if (D == 128) rows == 64 ? launch<128, false, 1>(p, B, device, stream) : launch<128, false, 2>(p, B, device, stream);
    else if (rows == 192) launch<64, false, 3>(p, B, device, stream);
    else if (rows == 64) launch<64, false, 1>(p, B, device, stream);
    else launch<64, false, 2>(p, B, device, stream);
  }
}

}  // namespace cuda
}  // namespace rt
