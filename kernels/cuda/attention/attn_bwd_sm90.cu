// attn_bwd_block on Hopper (bwd v4, sm_90a): gradients of one K/V block with warpgroup MMA (wgmma),
// recomputing P from the final LSE. Same contract and tiles as the mma.sync v1 kernel in attn_bwd_sm80.cu, which
// stays the fallback everywhere else; attn_bwd_dispatch.cu runs it for blocks too small for bwd v5.
//   P^T = exp2(S^T*scale*log2e - lse*log2e), dS^T = P^T (dP^T - delta),
//   dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K.
//   * D = 128 or 64 (template); one CTA = 128 keys of one (batch, K/V head) = 2 warpgroups x 64 keys, 256
//     threads, 1 CTA per SM; each warpgroup keeps the f32 dK and dV of its 64 keys (64 x D each) in registers
//     for the whole kernel;
//   * it loops over the query heads of its GQA group and over 64-row query tiles; Q, dO, lse and delta are
//     double-buffered with cp.async into 128-byte-swizzled shared memory
//     (kernels/cuda/attention/attn_sm90_wgmma_ops.cuh);
//   * S^T = K Q^T and dP^T = V dO^T: wgmma m64n64k16, K/V and Q/dO read K-major through descriptors; the
//     exps of P^T run while dP^T is still on the tensor cores;
//   * dV += P^T dO and dK += dS^T Q: P^T and dS^T are packed to bf16 in registers and are the register A
//     operands of wgmma m64nDk16; dO and Q are read MN-major (transpose bit), so no transposed copies;
//   * order per tile: S^T, dP^T | exps | dV issued | dS^T formed and stored | barrier | dQ, dK issued | dQ
//     adds while dK runs; the next tile's barrier waits for dK (its loads reuse this tile's Q buffer);
//   * dS^T goes to shared memory once (bf16, keys x queries); dQ (64 queries x 128) = dS K is one wgmma
//     m64n64k16 per warpgroup (its half of D) with both operands MN-major, added to the f32 dq_acc with
//     float2 reductions (red.global.add.v2.f32), or in deterministic mode with the ordered turn protocol of
//     attn_bwd_sm80.cu;
//   * D = 64: each warpgroup computes a partial dQ (64 queries x 64) over its own 64 keys (4 k-steps, so only
//     a warpgroup barrier after its dS^T store), the warpgroups swap column halves through shared memory and
//     each adds 32 columns of the sum: one add per dQ element per CTA, as at D = 128;
//   * causal: query tiles wholly before the key tile are never visited; only tiles that cross the
//     diagonal or a range end are masked;
//   * documents (kernels/cuda/attention/attn_doc_mask.cuh): without turn counters the query loop is narrowed to the span of
//     query tiles that see some key of the CTA; a warpgroup's (64 queries x 64 keys) pair runs unmasked when
//     every pair is visible, else the element mask zeroes P^T.
// dk_acc / dv_acc rows are each owned by one CTA; they are added with float2 reductions (write_dk_dv).
// bwd v5 (attn_bwd_sm90ws.cu) is the warp-specialized, persistent form of the same kernel, on the same tile body
// (attn_bwd_sm90_tile.cuh).
#include <climits>

#include "kernels/cuda/attention/attn_bwd_sm90.cuh"
#include "kernels/cuda/attention/attn_bwd_sm90_tile.cuh"
#include "kernels/cuda/attention/attn_sm90_wgmma_ops.cuh"

namespace rt {
namespace cuda {
namespace {

using namespace wgbwd;  // kBr (64), kBc (128), issue_kq, issue_acc, issue_dq, TileMask, tile_mask, compute_pt,
                        // issue_dv_wait_dp, compute_dst_store

constexpr int kWgBwdThreads = 256;

template <int D>
struct WgBwdSmem {
  static constexpr uint32_t kKVBytes = kBc * D * 2;     // (128, D) bf16 sw128
  static constexpr uint32_t kQBytes = kBr * D * 2;      // (64, D) bf16 sw128
  static constexpr uint32_t kDsBytes = kBc * kBr * 2;   // (128 keys, 64 queries) bf16 sw128
  static constexpr uint32_t kK = 0;
  static constexpr uint32_t kV = kK + kKVBytes;
  static constexpr uint32_t kQ = kV + kKVBytes;         // (2, 64, D)
  static constexpr uint32_t kDo = kQ + 2 * kQBytes;     // (2, 64, D)
  static constexpr uint32_t kDs = kDo + 2 * kQBytes;
  // D = 64 only: the dQ halves the two warpgroups swap, (2 writers, 4 column blocks, 128 threads) float4.
  static constexpr uint32_t kXchgBytes = D == 64 ? 2 * 4 * 128 * 16 : 0;
  static constexpr uint32_t kXchg = kDs + kDsBytes;
  static constexpr uint32_t kStats = kXchg + kXchgBytes;  // lse (2, 64) f32, then delta (2, 64) f32
  static constexpr size_t kBytes = size_t(kStats) + 4 * kBr * 4 + 1024;  // + alignment slack
};

// Adds this thread's dK and dV rows (keys key_a, key_b = key_a + 8; accumulator layout as in the kernels) to
// dk_acc / dv_acc with float2 reductions: no value comes back, so the CTA's last act is to issue 2 x D / 4
// stores instead of waiting for its reads (a read-add-write epilogue made every CTA wait for its reads at the end:
// bench/NOTES.md "Figures behind the kernel comments"). Each row belongs to one CTA, so there is one add per
// element per launch: still deterministic. v4's epilogue; v5 stages the rows and adds them with TMA (the same L2 add of the same f32 values: equal bits).
template <int D>
__device__ __forceinline__ void write_dk_dv(const AttnBwdParams& p, const float (&dk)[D / 2], const float (&dv)[D / 2],
                                            int64_t key_a, int64_t key_b, int64_t b, int64_t hk, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t key = r ? key_b : key_a;
    if (key >= p.k_end) continue;
    const int64_t off = ((b * p.Nk + key) * p.Hkv + hk) * D;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      atomic_add_f32x2(p.dk + off + col, dk[nt * 4 + 2 * r] * p.scale, dk[nt * 4 + 2 * r + 1] * p.scale);
      atomic_add_f32x2(p.dv + off + col, dv[nt * 4 + 2 * r], dv[nt * 4 + 2 * r + 1]);
    }
  }
}

struct dq_dims {
  int64_t b, h, q0;
};

// Adds this thread's dQ values (the 2 x NT float2 at columns col0 + nt*8 + 2t of query rows qa, qb = qa + 8)
// to dq_acc: float2 atomics, or in deterministic mode the ordered adds of attn_bwd_sm80.cu (key tile
// blockIdx.x adds when the query tile's counter reads it; every thread of the CTA must call this).
template <int D, int NT>
__device__ __forceinline__ void add_dq(const AttnBwdParams& p, const dq_dims& w, const float (&x)[4 * NT], int col0,
                                       int warp, int g, int t) {
  const int64_t qa = w.q0 + warp * 16 + g, qb = qa + 8;
  float* dq_a = p.dq + ((w.b * p.Nq + qa) * p.H + w.h) * D + col0;
  float* dq_b = p.dq + ((w.b * p.Nq + qb) * p.H + w.h) * D + col0;
  if (p.dq_turn == nullptr) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = nt * 8 + 2 * t;
      if (qa < p.q_end) atomic_add_f32x2(dq_a + col, x[nt * 4 + 0] * p.scale, x[nt * 4 + 1] * p.scale);
      if (qb < p.q_end) atomic_add_f32x2(dq_b + col, x[nt * 4 + 2] * p.scale, x[nt * 4 + 3] * p.scale);
    }
  } else {
    const int64_t n_tiles = (p.q_end - p.q_begin + kBr - 1) / kBr;
    int* turn = p.dq_turn + (w.b * p.H + w.h) * n_tiles + (w.q0 - p.q_begin) / kBr;
    const int mine = int(blockIdx.x);
    dq_turn_wait(turn, mine);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = nt * 8 + 2 * t;
      if (qa < p.q_end) ordered_add_f32x2(dq_a + col, x[nt * 4 + 0] * p.scale, x[nt * 4 + 1] * p.scale);
      if (qb < p.q_end) ordered_add_f32x2(dq_b + col, x[nt * 4 + 2] * p.scale, x[nt * 4 + 3] * p.scale);
    }
    dq_turn_pass(turn, mine);
  }
}

// D = 128, after dS^T of both warpgroups is in shared memory: dQ (64 queries x this warpgroup's 64 columns)
// = dS K, then dK += dS^T Q, which runs during the dQ adds. Returns with dK possibly still in flight.
__device__ __forceinline__ void dq_tile_d128(const AttnBwdParams& p, const dq_dims& w, float (&dk)[64],
                                             float (&dv)[64], uint32_t (&df)[16], uint32_t (&pf)[16],
                                             uint32_t ds_tile, uint32_t k_tile, uint32_t qs, int wg, int warp,
                                             int g, int t) {
  float dq[32];  // dq[nt*4 + 2r + e] = (query warp*16 + g + 8r, column wg*64 + nt*8 + 2t + e)
  begin_dq_dk(dq, dk, df);
  issue_dq<kBc>(dq, ds_tile, k_tile + uint32_t(wg) * (kBc * 128));
  wgmma_commit();
  issue_acc<128>(dk, df, qs);
  wgmma_commit();
  wgmma_wait<1>();  // dV and dQ done; dK may still run
  wgmma_fence_regs(dq);
  wgmma_fence_regs(dv);
  fence_regs_u32(pf);
  add_dq<128, 8>(p, w, dq, wg * 64, warp, g, t);
}

// D = 64, after this warpgroup's dS^T rows are in shared memory: a partial dQ (64 queries x 64) = dS K over
// this warpgroup's 64 keys, then dK += dS^T Q (runs during the exchange and the adds). The warpgroups swap
// halves through shared memory: warpgroup w adds columns [32w, 32w + 32) of both partials, so each dQ
// element gets one add per CTA, as at D = 128. Returns with dK possibly still in flight.
__device__ __forceinline__ void dq_tile_d64(const AttnBwdParams& p, const dq_dims& w, float (&dk)[32],
                                            float (&dv)[32], uint32_t (&df)[16], uint32_t (&pf)[16],
                                            uint32_t ds_tile, uint32_t k_tile, uint32_t qs, float4* xchg, int wg,
                                            int warp, int g, int t, int tid) {
  float dq[32];  // dq[nt*4 + 2r + e] = (query warp*16 + g + 8r, column nt*8 + 2t + e), this warpgroup's keys
  begin_dq_dk(dq, dk, df);
  issue_dq<64>(dq, ds_tile + uint32_t(wg) * 64 * 128, k_tile + uint32_t(wg) * 64 * 128);
  wgmma_commit();
  issue_acc<64>(dk, df, qs);
  wgmma_commit();
  wgmma_wait<1>();  // dV and dQ done; dK may still run
  wgmma_fence_regs(dq);
  wgmma_fence_regs(dv);
  fence_regs_u32(pf);
  // Thread l of warpgroup w holds the same (query, column) positions as thread l of the other warpgroup.
  // Register indices stay compile-time constants (selects, not dq[runtime]), so dq stays in registers.
  const int l = tid % 128, other = 1 - wg;
  const bool hi = wg == 1;
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // send the other warpgroup's columns: nt = 4 * other + j
    const float4 lo4 = make_float4(dq[j * 4], dq[j * 4 + 1], dq[j * 4 + 2], dq[j * 4 + 3]);
    const float4 hi4 = make_float4(dq[16 + j * 4], dq[16 + j * 4 + 1], dq[16 + j * 4 + 2], dq[16 + j * 4 + 3]);
    xchg[(wg * 4 + j) * 128 + l] = hi ? lo4 : hi4;
  }
  __syncthreads();  // both halves swapped; the next write is after the next tile's first barrier
  float mine[16];  // mine[4j + 2r + e] = column 32*wg + j*8 + 2t + e of query row r, both partials summed
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // keep this warpgroup's columns: nt = 4 * wg + j
    const float4 o = xchg[(other * 4 + j) * 128 + l];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float own = hi ? dq[16 + j * 4 + i] : dq[j * 4 + i];
      mine[j * 4 + i] = own + (i == 0 ? o.x : i == 1 ? o.y : i == 2 ? o.z : o.w);
    }
  }
  add_dq<64, 4>(p, w, mine, wg * 32, warp, g, t);
}

// Barrier of this warpgroup's 128 threads only (named barrier 1 + wg; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_barrier(int wg) {
  if (wg == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

template <int D>
__global__ void __launch_bounds__(kWgBwdThreads, 1) attn_bwd_wgmma_kernel(const AttnBwdParams p) {
#if RT_WGMMA_AVAILABLE
  static_assert(D == 64 || D == 128, "wgmma backward: D must be 64 or 128");
  using Smem = WgBwdSmem<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t k_tile = base + Smem::kK;     // (128, D) bf16 sw128
  const uint32_t v_tile = base + Smem::kV;     // (128, D) bf16 sw128
  const uint32_t q_tiles = base + Smem::kQ;    // (2, 64, D) bf16 sw128
  const uint32_t do_tiles = base + Smem::kDo;  // (2, 64, D) bf16 sw128
  const uint32_t ds_tile = base + Smem::kDs;   // (128 keys, 64 queries) bf16 sw128, dS^T
  float4* xchg = reinterpret_cast<float4*>(smem_raw + (base - raw) + Smem::kXchg);  // D = 64: (2, 4, 128)
  float* lse_s = reinterpret_cast<float*>(smem_raw + (base - raw) + Smem::kStats);  // (2, 64)
  float* delta_s = lse_s + 2 * kBr;                                                 // (2, 64)
  const uint32_t lse_addr = smem_addr(lse_s), delta_addr = smem_addr(delta_s);

  const int tid = int(threadIdx.x);
  const int wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // accumulator fragment row group and thread-in-group
  const int64_t k0 = p.k_begin + int64_t(blockIdx.x) * kBc;
  const int64_t hk = blockIdx.y, b = blockIdx.z;

  // Query tiles this CTA visits: [q_first, q_stop) in steps of Br, for each head of the group. Documents without
  // turn counters: the span of query tiles that see some key of this CTA.
  int64_t q_first = first_query_tile_row<kBr>(p, k0), q_stop = p.q_end;
  DocRange kdoc{};  // documents: the summary of this thread's warpgroup's 64 keys
  if (p.docs.on) {
    __shared__ int doc_red[2];
    const int kt = int((k0 - p.k_begin) / kDocTileRows);
    const DocRange cta = doc_k_range(p.docs, b, kt, kBc / kDocTileRows);
    if (p.dq_turn == nullptr &&
        !doc_query_span(p.docs, b, cta, p.q_begin, p.q_end, kWgBwdThreads, doc_red, q_first, q_stop))
      return;
    kdoc = doc_k_range(p.docs, b, kt + wg, 1);
  }
  if (q_first >= q_stop) return;  // no query sees these keys
  const int n_qt = int((q_stop - q_first + kBr - 1) / kBr);
  const int n_iter = int(p.group) * n_qt;

  const int64_t kv_stride = p.Hkv * D, q_stride = p.H * D;
  const __nv_bfloat16* k_head = p.k + (b * p.Nk * p.Hkv + hk) * D;
  const __nv_bfloat16* v_head = p.v + (b * p.Nk * p.Hkv + hk) * D;
  load_tile_sw128_async<kBc, D, kWgBwdThreads>(k_tile, k_head, kv_stride, k0, p.k_end);
  load_tile_sw128_async<kBc, D, kWgBwdThreads>(v_tile, v_head, kv_stride, k0, p.k_end);

  // Issues the loads of iteration `it` into buffer it & 1.
  auto issue = [&](int it) {
    const int64_t h = hk * p.group + it / n_qt;
    const int64_t q0 = q_first + int64_t(it % n_qt) * kBr;
    const uint32_t buf = uint32_t(it & 1);
    const int64_t head_off = (b * p.Nq * p.H + h) * D;
    load_tile_sw128_async<kBr, D, kWgBwdThreads>(q_tiles + buf * Smem::kQBytes, p.q + head_off, q_stride, q0, p.q_end);
    load_tile_sw128_async<kBr, D, kWgBwdThreads>(do_tiles + buf * Smem::kQBytes, p.dout + head_off, q_stride, q0,
                                            p.q_end);
    if (tid < 2 * kBr) {
      const int r = tid % kBr;
      const bool is_delta = tid >= kBr;
      const float* src = (is_delta ? p.delta : p.lse) + (b * p.H + h) * p.Nq;
      const bool ok = q0 + r < p.q_end;
      const uint32_t dst = (is_delta ? delta_addr : lse_addr) + (buf * kBr + uint32_t(r)) * 4;
      cp_async_4(dst, ok ? src + q0 + r : src, ok ? 4 : 0);
    }
    cp_async_commit();
  };
  issue(0);

  // This thread's keys: CTA-local rows krow0 = wg*64 + warp*16 + g and krow0 + 8.
  const int krow0 = wg * 64 + warp * 16 + g;
  const int64_t key_a = k0 + krow0, key_b = key_a + 8;
  int64_t kpos[2] = {0, 0};  // documents: the positions of this thread's keys
  if (p.docs.on) {
    kpos[0] = p.docs.k_pos[b * p.docs.k_stride + min(key_a, p.k_end - 1)];
    kpos[1] = p.docs.k_pos[b * p.docs.k_stride + min(key_b, p.k_end - 1)];
  }
  // Accumulators: x[nt*4 + 2r + e] = (key krow0 + 8r, column nt*8 + 2t + e).
  float dk[D / 2], dv[D / 2];  // (64 keys, D) of this warpgroup, f32
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
  float s[32], dp[32];  // (64 keys, 64 queries): S^T then P^T; dP^T then dS^T
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = dp[i] = 0.f;

  const uint32_t k_wg = k_tile + uint32_t(wg) * 64 * 128, v_wg = v_tile + uint32_t(wg) * 64 * 128;
  cp_async_wait<0>();  // K, V and the tiles of iteration 0
  fence_proxy_async_smem();
  for (int it = 0; it < n_iter; ++it) {
    // Every thread waited for its copies of `it` and fenced them to the async proxy in the middle of it - 1
    // (with its dS^T stores; the fence there also waits for its dQ atomics of it - 2, long done, instead of
    // this tile's, which are in flight here): after this barrier they are all in place, and every warpgroup
    // is done with the tiles of it - 1 and with dS^T.
    __syncthreads();
    if (it + 1 < n_iter) issue(it + 1);
    const int64_t h = hk * p.group + it / n_qt;
    const int64_t q0 = q_first + int64_t(it % n_qt) * kBr;
    const uint32_t buf = uint32_t(it & 1);
    const uint32_t qs = q_tiles + buf * Smem::kQBytes, dos = do_tiles + buf * Smem::kQBytes;
    const float* lse_t = lse_s + buf * kBr;      // (Br)
    const float* delta_t = delta_s + buf * kBr;  // (Br)

    // S^T = K Q^T and dP^T = V dO^T.
    wgmma_fence_regs(s);
    wgmma_fence_regs(dp);
    wgmma_fence();
    issue_kq<D>(s, k_wg, qs);
    wgmma_commit();
    issue_kq<D>(dp, v_wg, dos);
    wgmma_commit();
    wgmma_wait<1>();  // S^T ready; dP^T may still run
    wgmma_fence_regs(s);

    const bool need_mask = q0 + kBr > p.q_end || k0 + kBc > p.k_end || (p.causal && k0 + kBc - 1 > q0 + p.diag);
    compute_pt(s, p.scale2, lse_t, tile_mask(p, q0, k0), krow0, need_mask, t);
    if (p.docs.on && doc_tile_class(doc_q_range(p.docs, b, int((q0 - p.q_begin) / kDocTileRows), 1), kdoc) != kDocFull)
      doc_mask_pt(s, p, b, q0, kpos, t);  // warpgroup-uniform
    uint32_t pf[16], df[16];  // P^T and dS^T as bf16 A fragments: [4kk + {0,1,2,3}] = queries 16kk + ...
    issue_dv_wait_dp<D>(s, dp, dv, pf, dos);
    compute_dst_store(dp, df, s, delta_t, ds_tile, krow0, t);
    cp_async_wait<0>();        // this thread's copies of it + 1 (issued at the top of this tile)
    fence_proxy_async_smem();  // dS^T and those tiles, for the wgmma reads
    if constexpr (D == 128) {
      __syncthreads();  // dS^T of both warpgroups is in shared memory
      dq_tile_d128(p, dq_dims{b, h, q0}, dk, dv, df, pf, ds_tile, k_tile, qs, wg, warp, g, t);
    } else {
      warpgroup_barrier(wg);  // this warpgroup's dS^T rows are in shared memory (its dQ reads only those)
      dq_tile_d64(p, dq_dims{b, h, q0}, dk, dv, df, pf, ds_tile, k_tile, qs, xchg, wg, warp, g, t, tid);
    }
    wgmma_wait<0>();  // dK done: the next iteration's loads overwrite this Q buffer, and df is repacked
    wgmma_fence_regs(dk);
    fence_regs_u32(df);
  }

  write_dk_dv<D>(p, dk, dv, key_a, key_b, b, hk, t);
#else
  // Built without an sm_90a image: attn_bwd_wgmma_supported() refuses such binaries, so this never runs.
  __trap();
#endif
}

}  // namespace

bool attn_bwd_wgmma_supported(int device, int64_t D) {
  if (D != 128 && D != 64) return false;
  static int cached[kMaxDevices][2] = {};  // per device and D (128, 64): 0 unknown, 1 supported, 2 not
  int& c = cached[device_slot(device)][D == 64 ? 1 : 0];
  if (c == 0) {
    const bool ok = D == 64 ? wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_bwd_wgmma_kernel<64>))
                            : wgmma_kernel_runs_on(device, reinterpret_cast<const void*>(attn_bwd_wgmma_kernel<128>));
    c = ok ? 1 : 2;
  }
  return c == 1;
}

void launch_attn_bwd_wgmma(const AttnBwdParams& p, int64_t D, int64_t B, int device, cudaStream_t stream) {
  RT_CHECK(D == 128 || D == 64,
           "attn_bwd_block (wgmma): head dim " << D << " is not 64 or 128; use the mma.sync kernel");
  RT_CHECK(!p.overwrite_dkv, "attn_bwd_block (wgmma v4): only v5 overwrites dK / dV");
  const int64_t tiles = (p.k_end - p.k_begin + kBc - 1) / kBc;
  RT_CHECK(tiles <= INT_MAX, "attn_bwd_block: too many key rows (" << p.k_end - p.k_begin << ")");
  const dim3 grid(unsigned(tiles), unsigned(p.Hkv), unsigned(B));
  static bool configured[kMaxDevices][2] = {};  // the shared-memory opt-in is per device and kernel
  bool& done = configured[device_slot(device)][D == 64 ? 1 : 0];
  if (D == 64) {
    if (!done) CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_wgmma_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(WgBwdSmem<64>::kBytes)));
    attn_bwd_wgmma_kernel<64><<<grid, kWgBwdThreads, WgBwdSmem<64>::kBytes, stream>>>(p);
  } else {
    if (!done) CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_wgmma_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(WgBwdSmem<128>::kBytes)));
    attn_bwd_wgmma_kernel<128><<<grid, kWgBwdThreads, WgBwdSmem<128>::kBytes, stream>>>(p);
  }
  done = true;
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace rt
