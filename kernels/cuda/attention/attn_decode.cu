// attn_decode and attn_decode_partial on CUDA: split-KV decoding (FlashDecoding) in one launch. One new query per
// sequence against a long KV cache is a memory-bound stream of the cache, so the kernel is built around keeping HBM
// busy and paying little per call besides that stream:
//   1. The cache rows [0, len) of each (sequence, K/V head) are cut into `splits` chunks of whole 64-token tiles,
//      one CTA per (chunk, K/V head, head block, sequence), sized so one wave puts one CTA on every SM (the split
//      count comes from the SM count; see launch_decode). A CTA holds its group's (up to 16) query heads as one
//      mma.sync m-tile (heads past the group are zero rows), so each K/V row is read once for the whole group.
//   2. A CTA streams its chunk through a kDecStages-deep cp.async ring of K and V tiles (16-byte vectors into
//      swizzled shared memory; two tiles in flight while one is computed: 64 KB of loads in flight per CTA at d128).
//      Its 4 warps take 16 tokens each of every tile (scores, online softmax and P V on tensor cores, fp32 state),
//      then merge their states in shared memory.
//   3. With one split that state is the answer. Otherwise the CTA writes its chunk's partial state (acc, m, l) in
//      fp32 to `work` and arrives on its head block's counter (also in `work`); the last CTA of the block to arrive
//      resets the counter to 0 (so the next call needs no memset) and merges every chunk of the block (the fp32
//      log-sum-exp merge) into out (bf16) and lse, or into the state. No second kernel: its launch, the gap before
//      it and its serial loads were a fixed cost of every call (bench/NOTES.md "Split-KV decode: one launch").
// m is in the log2 domain of attn_fwd_block (scores prescaled by log2(e)/sqrt(D)). work layout: the arrival
// counters (B,H) u32 (attn_decode_counter_elems(B, H) elements; the one of (b, h) belongs to the head block whose
// first query head is h), then part_acc (B,H,S,D), part_m (B,H,S), part_l (B,H,S), S = the launch's split count.
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/pdl.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kDecWarps = 4;
constexpr int kDecThreads = kDecWarps * 32;
constexpr int kDecTileTokens = 64;  // K/V rows per pipeline stage: 16 per warp
constexpr int kDecStages = 3;       // cp.async ring depth: two tiles in flight while one is computed
constexpr int kDecRows = 16;        // query heads per CTA: one mma m-tile
constexpr int kDecMaxSplits = 256;  // the merging CTA keeps (16 heads, splits) weights in shared memory
static_assert(kDecTileTokens == kDecodeSplitTokens, "a split is a whole number of the kernel's tiles");

template <int D>
constexpr size_t decode_smem_bytes() {  // Q (16, D) bf16 + kDecStages x {K, V} (64, D) bf16
  return size_t(kDecRows) * D * 2 + size_t(kDecStages) * 2 * kDecTileTokens * D * 2;
}
template <int D>
constexpr size_t decode_stage_bytes() {  // the ring, reused after the stream by the reduction and the merge
  return size_t(kDecStages) * 2 * kDecTileTokens * D * 2;
}
template <int D>
constexpr size_t decode_reduce_bytes() {  // the warps' states: o (WARPS, 16, D), m and l (WARPS, 16) f32
  return size_t(kDecWarps) * kDecRows * (D + 2) * 4;
}
constexpr size_t decode_merge_bytes() {  // the chunks' m, then weights, and l (16, kDecMaxSplits); row m, l (16) f32
  return size_t(kDecRows) * (2 * kDecMaxSplits + 2) * 4;
}

struct DecodeResult {  // where the answer goes
  bool final_out;  // attn_decode: out and lse; attn_decode_partial: acc, m and l
  FloatPtr out;    // final: (B,1,H,D)
  float* lse;      // final: (B,H,1)
  float* acc;      // partial: state.acc (B,H,1,D)
  float* m;        // partial: state.m (B,H,1)
  float* l;        // partial: state.l (B,H,1)
};

struct DecodeParams {
  const __nv_bfloat16* q;  // (B,1,H,D)
  const __nv_bfloat16* k;  // (B,Nk,Hkv,D)
  const __nv_bfloat16* v;  // (B,Nk,Hkv,D)
  const int32_t* kv_len;   // (B) or null: Nk
  uint32_t* arrivals;      // (B,H): chunks of the head block starting at query head h done so far; 0 between calls
  float* part_acc;         // (B,H,S,D)
  float* part_m;           // (B,H,S)
  float* part_l;           // (B,H,S)
  DecodeResult res;        // out and lse, or the state
  int64_t Nk, chunk;       // cache rows; rows per split (a multiple of kDecTileTokens)
  int H, Hkv, group, hblocks, splits;
  float scale2;  // log2(e) / sqrt(D)
};

// Column `col` of query row `row` ((B,H) index) from its whole state: out = acc / l and lse = (m + log2 l) ln 2, or
// the state itself. A row that saw no key (l = 0): out 0, lse -inf; m -inf, l 0, acc 0.
template <int D>
__device__ __forceinline__ void store_result(const DecodeResult& r, int64_t row, int col, float a, float m, float l) {
  if (r.final_out) {
    r.out.st(row * D + col, l > 0.f ? a / l : 0.f);
    if (col == 0) r.lse[row] = l > 0.f ? (m + log2f(l)) * kLn2 : -INFINITY;
  } else {
    r.acc[row * D + col] = a;
    if (col == 0) r.m[row] = m, r.l[row] = l;
  }
}

// The last CTA of a head block: the log-sum-exp merge of the block's `rows` query heads (from (B,H) row row0 on)
// over the launch's S chunks, read from L2 (other CTAs wrote them; ld.cg never sees a stale L1 line). `sm` is
// decode_merge_bytes() of shared memory. Every load of a pass is independent, so each pass costs about one L2
// round trip per 16 chunks. Not inlined: inlined, it changes the register allocation of the streaming loop.
template <int D>
__device__ __noinline__ void merge_chunks(const DecodeResult res, const float* part_acc, const float* part_m,
                                          const float* part_l, int S, int64_t row0, int rows, float* sm) {
  constexpr int kVecs = D / 4;  // float4 columns of a row
  float* w_s = sm;                               // (16, kDecMaxSplits): the chunks' m, then their weights
  float* l_s = w_s + kDecRows * kDecMaxSplits;   // (16, kDecMaxSplits): the chunks' l
  float* row_m = l_s + kDecRows * kDecMaxSplits;  // (16): the merged m
  float* row_l = row_m + kDecRows;               // (16): the merged l
#pragma unroll 4
  for (int idx = int(threadIdx.x); idx < rows * S; idx += kDecThreads) {
    const int r = idx / S, s = idx - r * S;
    const int64_t prow = (row0 + r) * S + s;  // (B,H,S) index
    w_s[r * kDecMaxSplits + s] = __ldcg(part_m + prow);
    l_s[r * kDecMaxSplits + s] = __ldcg(part_l + prow);
  }
  __syncthreads();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  for (int r = warp; r < rows; r += kDecWarps) {  // one warp per head: max, weights 2^(m_s - m), l = sum w_s l_s
    float* wr = w_s + r * kDecMaxSplits;
    const float* lr = l_s + r * kDecMaxSplits;
    float mx = -INFINITY;
    for (int s = lane; s < S; s += 32) mx = fmaxf(mx, wr[s]);
    mx = warp_max(mx);
    float l = 0.f;
    for (int s = lane; s < S; s += 32) {
      const float ms = wr[s];
      const float w = ms == -INFINITY ? 0.f : exp2f(ms - mx);  // a chunk that saw no key weighs 0
      wr[s] = w;
      l += w * lr[s];
    }
    l = warp_sum(l);
    if (lane == 0) row_m[r] = mx, row_l[r] = l;
  }
  __syncthreads();
  for (int item = int(threadIdx.x); item < rows * kVecs; item += kDecThreads) {
    const int r = item / kVecs, c = (item % kVecs) * 4;
    const float* wr = w_s + r * kDecMaxSplits;
    const float4* src = reinterpret_cast<const float4*>(part_acc + (row0 + r) * S * D + c);  // (S) stride D/4
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 16
    for (int s = 0; s < S; ++s) {
      const float w = wr[s];
      const float4 x = __ldcg(src + int64_t(s) * kVecs);
      a.x = fmaf(w, x.x, a.x), a.y = fmaf(w, x.y, a.y), a.z = fmaf(w, x.z, a.z), a.w = fmaf(w, x.w, a.w);
    }
    const float mx = row_m[r], l = row_l[r];
    store_result<D>(res, row0 + r, c, a.x, mx, l);
    store_result<D>(res, row0 + r, c + 1, a.y, mx, l);
    store_result<D>(res, row0 + r, c + 2, a.z, mx, l);
    store_result<D>(res, row0 + r, c + 3, a.w, mx, l);
  }
}

template <int D>
__global__ void __launch_bounds__(kDecThreads) attn_decode_split_kernel(const DecodeParams p) {
  constexpr int kKSlices = D / 16;  // k-steps of the Q K^T mma
  constexpr int kDTiles = D / 8;    // n-tiles of the output
  constexpr uint32_t kTileBytes = kDecTileTokens * D * 2;
  static_assert(decode_reduce_bytes<D>() <= decode_stage_bytes<D>(), "the reduction reuses the stages");
  static_assert(decode_merge_bytes() <= decode_stage_bytes<D>(), "the merge reuses the stages");
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int verdict;                                // the arrival's outcome, for the whole CTA
  const uint32_t q_tile = smem_addr(smem);             // (16, D) bf16
  const uint32_t kv_tiles = q_tile + kDecRows * D * 2;  // (kDecStages, {K, V}, 64, D) bf16

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment row group and thread-in-group
  const int split = int(blockIdx.x);
  const int hk = int(blockIdx.y) / p.hblocks, hb = int(blockIdx.y) % p.hblocks;
  const int64_t b = blockIdx.z;
  const int head0 = hk * p.group + hb * kDecRows;        // first query head of this CTA
  const int rows = min(kDecRows, p.group - hb * kDecRows);  // its real query heads
  const int64_t row0 = b * p.H + head0;                    // (B,H) index of its first query head
  int64_t len = p.Nk;
  if (p.kv_len != nullptr) len = min(max(int64_t(p.kv_len[b]), int64_t(0)), p.Nk);
  const int64_t k_lo = min(int64_t(split) * p.chunk, len), k_hi = min(k_lo + p.chunk, len);
  const int n_tiles = int((k_hi - k_lo + kDecTileTokens - 1) / kDecTileTokens);

  const int64_t kv_stride = int64_t(p.Hkv) * D;  // elements between cache rows
  const __nv_bfloat16* q_rows = p.q + row0 * D;   // (rows, D)
  const __nv_bfloat16* k_head = p.k + (b * p.Nk * p.Hkv + hk) * D;
  const __nv_bfloat16* v_head = p.v + (b * p.Nk * p.Hkv + hk) * D;
  auto load_kv = [&](int tile, int stage) {  // rows past k_hi are zero-filled (and masked below)
    const uint32_t ks = kv_tiles + uint32_t(stage) * 2 * kTileBytes;
    const int64_t krow0 = k_lo + int64_t(tile) * kDecTileTokens;
    load_tile_async<kDecTileTokens, D, kDecThreads>(ks, k_head, kv_stride, krow0, k_hi);
    load_tile_async<kDecTileTokens, D, kDecThreads>(ks + kTileBytes, v_head, kv_stride, krow0, k_hi);
  };

  // Prologue: Q (heads past the group zero-filled), then the first kDecStages - 1 tiles, one commit group each.
  load_tile_async<kDecRows, D, kDecThreads>(q_tile, q_rows, D, 0, rows);
  cp_async_commit();
#pragma unroll
  for (int st = 0; st < kDecStages - 1; ++st) {
    if (st < n_tiles) load_kv(st, st);
    cp_async_commit();
  }
  cp_async_wait<kDecStages - 1>();  // the Q group has landed
  __syncthreads();
  uint32_t qa[kKSlices][4];  // Q as mma A fragments, for the whole chunk
#pragma unroll
  for (int kk = 0; kk < kKSlices; ++kk) ldmatrix_x4(qa[kk], q_tile + tile_offset<D>(lane % 16, kk * 2 + lane / 16));

  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // rows g and g + 8; l: per-thread partial sums
  float o[kDTiles][4];                                             // (16, D) accumulator fragments
#pragma unroll
  for (int nt = 0; nt < kDTiles; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  const int tok0 = warp * 16;  // this warp's 16 rows of each tile

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait<kDecStages - 2>();  // tile `it` has landed (this thread's part)
    __syncthreads();                  // ... every thread's; and every warp is done with tile it - 1's stage
    if (it + kDecStages - 1 < n_tiles) load_kv(it + kDecStages - 1, (it + kDecStages - 1) % kDecStages);
    cp_async_commit();  // always, so the group count stays in step
    const uint32_t ks = kv_tiles + uint32_t(it % kDecStages) * 2 * kTileBytes, vs = ks + kTileBytes;
    const int kmax = int(min(k_hi - (k_lo + int64_t(it) * kDecTileTokens), int64_t(kDecTileTokens)));

    float s[2][4] = {};  // (16 heads, 16 tokens) scores
#pragma unroll
    for (int kk = 0; kk < kKSlices; ++kk) {
      uint32_t kb[4];
      ldmatrix_x4(kb, ks + tile_offset<D>(tok0 + (lane / 16) * 8 + (lane % 8), kk * 2 + (lane / 8) % 2));
      mma_bf16(s[0], qa[kk], kb[0], kb[1]);
      mma_bf16(s[1], qa[kk], kb[2], kb[3]);
    }
    if (kmax < kDecTileTokens) {  // the chunk's last, partial tile
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (tok0 + nt * 8 + 2 * t + (e & 1) >= kmax) s[nt][e] = -INFINITY;
    }

    // Online softmax in the log2 domain.
    float muse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mnew = fmaxf(m_run[r], mx * p.scale2);
      muse[r] = mnew == -INFINITY ? 0.f : mnew;  // never (-inf) - (-inf)
      const float alpha = fast_exp2(m_run[r] - muse[r]);
      m_run[r] = mnew;
      l_run[r] *= alpha;
#pragma unroll
      for (int nt = 0; nt < kDTiles; ++nt) {
        o[nt][2 * r] *= alpha;
        o[nt][2 * r + 1] *= alpha;
      }
    }
    uint32_t pa[4];  // P (16 heads, 16 tokens) as a bf16 A fragment
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float p0 = fast_exp2(fmaf(s[half][2 * r], p.scale2, -muse[r]));
        const float p1 = fast_exp2(fmaf(s[half][2 * r + 1], p.scale2, -muse[r]));
        l_run[r] += p0 + p1;
        pa[half * 2 + r] = pack_bf16(p0, p1);
      }
#pragma unroll
    for (int dp = 0; dp < kDTiles / 2; ++dp) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, vs + tile_offset<D>(tok0 + (lane % 8) + ((lane / 8) % 2) * 8, dp * 2 + lane / 16));
      mma_bf16(o[2 * dp], pa, vb[0], vb[1]);
      mma_bf16(o[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }
  allow_dependent_launch();  // a kernel launched after this one with PDL may be scheduled; it waits for this grid

  // Merge the 4 warps' states through shared memory (the stages are free once every copy has landed).
  cp_async_wait<0>();
  __syncthreads();
  float* red_o = reinterpret_cast<float*>(smem + kDecRows * D * 2);  // (WARPS, 16, D)
  float* red_m = red_o + kDecWarps * kDecRows * D;                   // (WARPS, 16)
  float* red_l = red_m + kDecWarps * kDecRows;                       // (WARPS, 16)
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lx = l_run[r];
    lx += __shfl_xor_sync(0xffffffffu, lx, 1);
    lx += __shfl_xor_sync(0xffffffffu, lx, 2);
    const int row = warp * kDecRows + g + 8 * r;
    if (t == 0) red_m[row] = m_run[r], red_l[row] = lx;
#pragma unroll
    for (int nt = 0; nt < kDTiles; ++nt)
      *reinterpret_cast<float2*>(red_o + row * D + nt * 8 + 2 * t) = make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
  }
  __syncthreads();
  for (int idx = int(threadIdx.x); idx < rows * D; idx += kDecThreads) {
    const int row = idx / D, col = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) mx = fmaxf(mx, red_m[w * kDecRows + row]);
    float a = 0.f, l = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kDecWarps; ++w) {
        const float mw = red_m[w * kDecRows + row];
        const float c = mw == -INFINITY ? 0.f : exp2f(mw - mx);
        a += c * red_o[(w * kDecRows + row) * D + col];
        l += c * red_l[w * kDecRows + row];
      }
    }
    if (p.splits == 1) {  // the whole cache was this chunk: the answer
      store_result<D>(p.res, row0 + row, col, a, mx, l);
    } else {
      const int64_t prow = (row0 + row) * p.splits + split;  // (B,H,S) index
      p.part_acc[prow * D + col] = a;
      if (col == 0) p.part_m[prow] = mx, p.part_l[prow] = l;
    }
  }
  if (p.splits == 1) return;

  // Arrive on the head block's counter: every thread's partial is visible device-wide before thread 0 counts it.
  enum { kNotLast = 0, kLast = 1, kStale = 2 };
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* counter = p.arrivals + row0;
    const uint32_t before = atomicAdd(counter, 1u);
    int v = kNotLast;
    if (before == uint32_t(p.splits - 1)) {  // every other chunk of the block has arrived: reset for the next call
      atomicExch(counter, 0u);
      __threadfence();  // the other chunks' partials are read after their arrivals
      v = kLast;
    } else if (before >= uint32_t(p.splits)) {  // the counter was not zero before the call: the contract is broken
      v = kStale;
    }
    verdict = v;
  }
  __syncthreads();
  if (verdict == kNotLast) return;
  if (verdict == kStale) {  // no CTA can tell when the block is done: make the result loudly wrong (out, lse NaN)
    for (int idx = int(threadIdx.x); idx < rows * D; idx += kDecThreads)
      store_result<D>(p.res, row0 + idx / D, idx % D, NAN, NAN, 1.f);
    return;
  }
  merge_chunks<D>(p.res, p.part_acc, p.part_m, p.part_l, p.splits, row0, rows,
                  reinterpret_cast<float*>(smem + kDecRows * D * 2));
}

// CTAs of the split kernel resident per SM (occupancy API), once per device; also opts into its shared memory.
template <int D>
int split_ctas_per_sm(int device) {
  static int cached[kMaxDevices] = {};
  int& per_sm = cached[device_slot(device)];
  if (per_sm == 0) {
    constexpr size_t smem = decode_smem_bytes<D>();
    CUDA_CHECK(cudaFuncSetAttribute(attn_decode_split_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attn_decode_split_kernel<D>, kDecThreads,
                                                             smem));
    RT_CHECK(per_sm > 0, "attn_decode: the split kernel (d" << D << ", " << smem
                                                            << " bytes of shared memory) does not fit on this GPU");
  }
  return per_sm;
}

// RT_DECODE_SPLITS=n in the environment forces n splits (clamped to the launch's bounds), for split-count studies
// (bench/decode_study.sh); unset or 0: the heuristic below.
int64_t forced_splits() {
  static const int64_t n = [] {
    const char* env = std::getenv("RT_DECODE_SPLITS");
    return env == nullptr ? int64_t(0) : std::max<int64_t>(0, std::atoll(env));
  }();
  return n;
}

// The split count: fewest waves x longest chunk (in tiles, plus a fixed cost of ~2 tiles per CTA for its prologue
// and merge), over S in [1, hi], hi = min(the workspace's bound, tiles, kDecMaxSplits). Within one number of waves
// the largest S is the best, so only those S are tried: a few, not hi (the loop runs on every call's path).
int choose_splits(int64_t pairs, int64_t tiles, int64_t max_splits, int64_t slots) {
  constexpr int64_t kCtaOverheadTiles = 2;
  const int64_t hi = std::max<int64_t>(1, std::min({max_splits, tiles, int64_t(kDecMaxSplits)}));
  if (forced_splits() > 0) return int(std::min(forced_splits(), hi));
  auto cost = [&](int64_t s) { return (pairs * s + slots - 1) / slots * ((tiles + s - 1) / s + kCtaOverheadTiles); };
  int64_t best = 1, best_cost = cost(1);
  for (int64_t w = std::max<int64_t>(1, pairs / slots);; ++w) {
    const int64_t s = std::min(hi, w * slots / pairs);  // the most splits that fit in w waves
    if (s > best) {
      const int64_t c = cost(s);
      if (c < best_cost) best = s, best_cost = c;
    }
    if (s >= hi) break;
  }
  return int(best);
}

template <int D>
void launch_decode(DecodeParams p, int64_t B, int device, cudaStream_t stream) {
  const int64_t pairs = B * p.Hkv * p.hblocks;
  const int64_t tiles = (p.Nk + kDecTileTokens - 1) / kDecTileTokens;
  // One CTA an SM, though two fit (split_ctas_per_sm also opts into the shared memory): fewer, longer chunks halve
  // the partials the last CTA merges after the stream, and a decode step at 32K on an H200 ran 795 tokens/s with 33
  // splits against 758 with the 65 that filling both slots gave, 746 with 130 (bench/NOTES.md "Decode: the norms
  // and SwiGLU in the GEMV").
  split_ctas_per_sm<D>(device);
  const int64_t slots = int64_t(device_props().multiProcessorCount);
  const int s = choose_splits(pairs, tiles, attn_decode_max_splits(B, p.Hkv, p.Nk), slots);
  p.chunk = std::max<int64_t>(1, (tiles + s - 1) / s) * kDecTileTokens;
  p.splits = int(std::max<int64_t>(1, (p.Nk + p.chunk - 1) / p.chunk));  // no split left wholly empty by rounding
  // The partial arrays, carved out of work (after the counters) for this launch's split count.
  const int64_t parts = B * p.H * int64_t(p.splits);
  p.part_m = p.part_acc + parts * D;
  p.part_l = p.part_m + parts;
  const dim3 grid(unsigned(p.splits), unsigned(p.Hkv * p.hblocks), unsigned(B));
  attn_decode_split_kernel<D><<<grid, kDecThreads, decode_smem_bytes<D>(), stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

void run_decode(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_len, Tensor work, bool final_out,
                const Tensor& out, const Tensor& lse, const AttnState* state, const char* op) {
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_decode_dims(q, k, v, kv_len, work, op);
  attn_dims(q, k, v, op);  // bf16, 16-byte aligned, D in {64, 128}
  const Device& dev = q.device;
  RT_CHECK(reinterpret_cast<uintptr_t>(work.data) % 16 == 0,
           op << ": work must be 16-byte aligned (allocate it from an Arena, or as its own buffer)");
  DecodeParams p{};
  p.res.final_out = final_out;
  if (final_out) {
    check_shape(out, {d.B, 1, d.H, d.D}, op, "out (B,1,H,D)");
    check_shape(lse, {d.B, d.H, 1}, op, "lse (B,H,1)");
    p.res.out = float_arg(out, dev, op, "out");
    require_dtype_on(lse, DType::f32, dev, op, "lse");
    p.res.lse = lse.ptr<float>();
  } else {
    check_attn_decode_state(d, *state, op);
    require_dtype_on(state->acc, DType::f32, dev, op, "state.acc");
    require_dtype_on(state->m, DType::f32, dev, op, "state.m");
    require_dtype_on(state->l, DType::f32, dev, op, "state.l");
    p.res.acc = state->acc.ptr<float>(), p.res.m = state->m.ptr<float>(), p.res.l = state->l.ptr<float>();
  }
  if (d.B == 0 || d.H == 0) return;
  const int64_t hblocks = (d.group + kDecRows - 1) / kDecRows;
  RT_CHECK(d.Hkv * hblocks <= 65535, op << ": Hkv=" << d.Hkv << " K/V heads are more than one launch takes");
  p.q = q.ptr<__nv_bfloat16>(), p.k = k.ptr<__nv_bfloat16>(), p.v = v.ptr<__nv_bfloat16>();
  p.kv_len = kv_len.defined() ? kv_len.ptr<int32_t>() : nullptr;
  p.arrivals = reinterpret_cast<uint32_t*>(work.ptr<float>());  // (B,H) u32, zero between calls
  p.part_acc = work.ptr<float>() + attn_decode_counter_elems(d.B, d.H);
  p.Nk = d.Nk;
  p.H = int(d.H), p.Hkv = int(d.Hkv), p.group = int(d.group), p.hblocks = int(hblocks);
  p.scale2 = kLog2e / sqrtf(float(d.D));
  if (d.D == 64) launch_decode<64>(p, d.B, dev.index, stream);
  else launch_decode<128>(p, d.B, dev.index, stream);
}

}  // namespace

void attn_decode(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_len, Tensor work, Tensor out,
                 Tensor lse) {
  run_decode(q, k, v, kv_len, work, true, out, lse, nullptr, "attn_decode");
}

void attn_decode_partial(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_len, Tensor work,
                         AttnState& state) {
  run_decode(q, k, v, kv_len, work, false, Tensor{}, Tensor{}, &state, "attn_decode_partial");
}

}  // namespace cuda
}  // namespace rt
