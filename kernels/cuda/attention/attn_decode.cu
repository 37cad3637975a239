// attn_decode and attn_decode_partial on CUDA: split-KV decoding (FlashDecoding). One new query per sequence
// against a long KV cache is a memory-bound stream of the cache, so the kernels are built around keeping HBM busy:
//   1. attn_decode_split_kernel: the cache rows [0, len) of each (sequence, K/V head) are cut into `splits` chunks
//      of whole 64-token tiles, one CTA per (chunk, K/V head, sequence), sized so one wave fills every SM (the split
//      count comes from the SM count and the kernel's occupancy). A CTA holds its group's (up to 16) query heads as
//      one mma.sync m-tile (heads past the group are zero rows), so each K/V row is read once for the whole group.
//      It streams its chunk through a kDecStages-deep cp.async ring of K and V tiles (16-byte vectors into swizzled
//      shared memory; two tiles in flight while one is computed: 64 KB of loads in flight per CTA at d128).
//      Its 4 warps take 16 tokens each of every tile (scores, online softmax and P V on tensor cores, fp32 state),
//      then merge their states in shared memory and write the chunk's partial state (acc, m, l) in fp32 to `work`.
//   2. attn_decode_combine_kernel (launched with PDL so its launch overlaps the split kernel's tail): per query
//      head, the fp32 log-sum-exp merge of the chunks' states, written as out (bf16) and lse, or as the state.
// m is in the log2 domain of attn_fwd_block (scores prescaled by log2(e)/sqrt(D)); work layout: part_acc (B,H,S,D),
// then part_m (B,H,S), then part_l (B,H,S), S = the launch's split count.
#include <algorithm>

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
static_assert(kDecTileTokens == kDecodeSplitTokens, "a split is a whole number of the kernel's tiles");

template <int D>
constexpr size_t decode_smem_bytes() {  // Q (16, D) bf16 + kDecStages x {K, V} (64, D) bf16
  return size_t(kDecRows) * D * 2 + size_t(kDecStages) * 2 * kDecTileTokens * D * 2;
}
template <int D>
constexpr size_t decode_reduce_bytes() {  // the warps' states: o (WARPS, 16, D), m and l (WARPS, 16) f32
  return size_t(kDecWarps) * kDecRows * (D + 2) * 4;
}

struct DecodeParams {
  const __nv_bfloat16* q;  // (B,1,H,D)
  const __nv_bfloat16* k;  // (B,Nk,Hkv,D)
  const __nv_bfloat16* v;  // (B,Nk,Hkv,D)
  const int32_t* kv_len;   // (B) or null: Nk
  float* part_acc;         // (B,H,S,D)
  float* part_m;           // (B,H,S)
  float* part_l;           // (B,H,S)
  int64_t Nk, chunk;       // cache rows; rows per split (a multiple of kDecTileTokens)
  int H, Hkv, group, hblocks, splits;
  float scale2;  // log2(e) / sqrt(D)
};

template <int D>
__global__ void __launch_bounds__(kDecThreads) attn_decode_split_kernel(const DecodeParams p) {
  constexpr int kKSlices = D / 16;  // k-steps of the Q K^T mma
  constexpr int kDTiles = D / 8;    // n-tiles of the output
  constexpr uint32_t kTileBytes = kDecTileTokens * D * 2;
  static_assert(decode_reduce_bytes<D>() <= size_t(kDecStages) * 2 * kTileBytes, "the reduction reuses the stages");
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_tile = smem_addr(smem);             // (16, D) bf16
  const uint32_t kv_tiles = q_tile + kDecRows * D * 2;  // (kDecStages, {K, V}, 64, D) bf16

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment row group and thread-in-group
  const int split = int(blockIdx.x);
  const int hk = int(blockIdx.y) / p.hblocks, hb = int(blockIdx.y) % p.hblocks;
  const int64_t b = blockIdx.z;
  const int head0 = hk * p.group + hb * kDecRows;        // first query head of this CTA
  const int rows = min(kDecRows, p.group - hb * kDecRows);  // its real query heads
  int64_t len = p.Nk;
  if (p.kv_len != nullptr) len = min(max(int64_t(p.kv_len[b]), int64_t(0)), p.Nk);
  const int64_t k_lo = min(int64_t(split) * p.chunk, len), k_hi = min(k_lo + p.chunk, len);
  const int n_tiles = int((k_hi - k_lo + kDecTileTokens - 1) / kDecTileTokens);

  const int64_t kv_stride = int64_t(p.Hkv) * D;  // elements between cache rows
  const __nv_bfloat16* q_rows = p.q + (b * p.H + head0) * D;  // (rows, D)
  const __nv_bfloat16* k_head = p.k + (b * p.Nk * p.Hkv + hk) * D;
  const __nv_bfloat16* v_head = p.v + (b * p.Nk * p.Hkv + hk) * D;
  auto load_kv = [&](int tile, int stage) {  // rows past k_hi are zero-filled (and masked below)
    const uint32_t ks = kv_tiles + uint32_t(stage) * 2 * kTileBytes;
    const int64_t row0 = k_lo + int64_t(tile) * kDecTileTokens;
    load_tile_async<kDecTileTokens, D, kDecThreads>(ks, k_head, kv_stride, row0, k_hi);
    load_tile_async<kDecTileTokens, D, kDecThreads>(ks + kTileBytes, v_head, kv_stride, row0, k_hi);
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
  allow_dependent_launch();  // the combine kernel may be scheduled; it waits for this grid's memory

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
    const int64_t prow = (b * p.H + head0 + row) * p.splits + split;  // (B,H,S) index
    p.part_acc[prow * D + col] = a;
    if (col == 0) p.part_m[prow] = mx, p.part_l[prow] = l;
  }
}

struct CombineParams {
  const float* part_acc;  // (B,H,S,D)
  const float* part_m;    // (B,H,S)
  const float* part_l;    // (B,H,S)
  FloatPtr out;           // final: (B,1,H,D); partial: unused
  float* lse;             // final: (B,H,1)
  float* acc;             // partial: state.acc (B,H,1,D)
  float* m;               // partial: state.m (B,H,1)
  float* l;               // partial: state.l (B,H,1)
  int splits, D;
};

// One CTA per (head, sequence), one thread per column: the log-sum-exp merge of the splits' states.
template <bool kFinal>
__global__ void attn_decode_combine_kernel(const CombineParams c) {
  grid_dependency_wait();  // launched with PDL: the split kernel's partials are visible after this
  const int64_t row = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;  // (B,H) index
  const int col = int(threadIdx.x);
  const float* pm = c.part_m + row * c.splits;                  // (S)
  const float* pl = c.part_l + row * c.splits;                  // (S)
  const float* pa = c.part_acc + row * c.splits * c.D + col;    // (S) with stride D
  float mx = -INFINITY;
  for (int s = 0; s < c.splits; ++s) mx = fmaxf(mx, pm[s]);
  float a = 0.f, l = 0.f;
  if (mx != -INFINITY) {
#pragma unroll 4
    for (int s = 0; s < c.splits; ++s) {
      const float ms = pm[s];
      const float w = ms == -INFINITY ? 0.f : exp2f(ms - mx);
      a += w * pa[int64_t(s) * c.D];
      l += w * pl[s];
    }
  }
  if (kFinal) {
    c.out.st(row * c.D + col, l > 0.f ? a / l : 0.f);
    if (col == 0) c.lse[row] = l > 0.f ? (mx + log2f(l)) * kLn2 : -INFINITY;
  } else {
    c.acc[row * c.D + col] = a;
    if (col == 0) c.m[row] = mx, c.l[row] = l;
  }
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

// The split count: fewest waves x longest chunk (in tiles, plus a fixed cost of ~2 tiles per CTA for its prologue
// and merge), over S in [1, min(the workspace's bound, tiles)].
int choose_splits(int64_t pairs, int64_t tiles, int64_t max_splits, int64_t slots) {
  constexpr int64_t kCtaOverheadTiles = 2;
  const int64_t hi = std::max<int64_t>(1, std::min(max_splits, tiles));
  int64_t best = 1, best_cost = INT64_MAX;
  for (int64_t s = 1; s <= hi; ++s) {
    const int64_t waves = (pairs * s + slots - 1) / slots;
    const int64_t cost = waves * ((tiles + s - 1) / s + kCtaOverheadTiles);
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return int(best);
}

template <int D>
void launch_decode(DecodeParams p, CombineParams c, int64_t B, bool final_out, int device, cudaStream_t stream) {
  const int64_t pairs = B * p.Hkv * p.hblocks;
  const int64_t tiles = (p.Nk + kDecTileTokens - 1) / kDecTileTokens;
  const int64_t slots = int64_t(split_ctas_per_sm<D>(device)) * device_props().multiProcessorCount;
  const int s = choose_splits(pairs, tiles, attn_decode_max_splits(B, p.Hkv, p.Nk), slots);
  p.chunk = std::max<int64_t>(1, (tiles + s - 1) / s) * kDecTileTokens;
  p.splits = int(std::max<int64_t>(1, (p.Nk + p.chunk - 1) / p.chunk));  // no split left wholly empty by rounding
  c.splits = p.splits;
  // The partial arrays, carved out of work for this launch's split count (within attn_decode_work_elems).
  const int64_t parts = B * p.H * int64_t(p.splits);
  p.part_m = p.part_acc + parts * D;
  p.part_l = p.part_m + parts;
  c.part_acc = p.part_acc, c.part_m = p.part_m, c.part_l = p.part_l;
  const dim3 grid(unsigned(p.splits), unsigned(p.Hkv * p.hblocks), unsigned(B));
  attn_decode_split_kernel<D><<<grid, kDecThreads, decode_smem_bytes<D>(), stream>>>(p);
  CUDA_CHECK_LAUNCH();
  const dim3 cgrid(unsigned(p.H), unsigned(B));
  if (final_out) launch_dependent_kernel(attn_decode_combine_kernel<true>, cgrid, dim3(D), 0, stream, c);
  else launch_dependent_kernel(attn_decode_combine_kernel<false>, cgrid, dim3(D), 0, stream, c);
}

void run_decode(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_len, Tensor work, bool final_out,
                const Tensor& out, const Tensor& lse, const AttnState* state, const char* op) {
  cudaStream_t stream = stream_for(q, op);
  const AttnDims d = attn_decode_dims(q, k, v, kv_len, work, op);
  attn_dims(q, k, v, op);  // bf16, 16-byte aligned, D in {64, 128}
  const Device& dev = q.device;
  CombineParams c{};
  c.D = int(d.D);
  if (final_out) {
    check_shape(out, {d.B, 1, d.H, d.D}, op, "out (B,1,H,D)");
    check_shape(lse, {d.B, d.H, 1}, op, "lse (B,H,1)");
    c.out = float_arg(out, dev, op, "out");
    require_dtype_on(lse, DType::f32, dev, op, "lse");
    c.lse = lse.ptr<float>();
  } else {
    check_attn_decode_state(d, *state, op);
    require_dtype_on(state->acc, DType::f32, dev, op, "state.acc");
    require_dtype_on(state->m, DType::f32, dev, op, "state.m");
    require_dtype_on(state->l, DType::f32, dev, op, "state.l");
    c.acc = state->acc.ptr<float>(), c.m = state->m.ptr<float>(), c.l = state->l.ptr<float>();
  }
  if (d.B == 0 || d.H == 0) return;
  const int64_t hblocks = (d.group + kDecRows - 1) / kDecRows;
  RT_CHECK(d.Hkv * hblocks <= 65535, op << ": Hkv=" << d.Hkv << " K/V heads are more than one launch takes");
  DecodeParams p{};
  p.q = q.ptr<__nv_bfloat16>(), p.k = k.ptr<__nv_bfloat16>(), p.v = v.ptr<__nv_bfloat16>();
  p.kv_len = kv_len.defined() ? kv_len.ptr<int32_t>() : nullptr;
  p.part_acc = work.ptr<float>();
  p.Nk = d.Nk;
  p.H = int(d.H), p.Hkv = int(d.Hkv), p.group = int(d.group), p.hblocks = int(hblocks);
  p.scale2 = kLog2e / sqrtf(float(d.D));
  if (d.D == 64) launch_decode<64>(p, c, d.B, final_out, dev.index, stream);
  else launch_decode<128>(p, c, d.B, final_out, dev.index, stream);
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
