// The document mask of the CUDA attention kernels (AttnMask::docs; DESIGN.md "Document masks"): a query at
// position pos(i) whose document starts at doc(i) sees key j iff doc(i) <= kpos(j) <= pos(i).
// Before each call, attn_doc_mask_setup (attn_doc_mask.cu) summarises the call's rows in 64-row tiles aligned to
// q_begin and k_begin: per query tile the min and max of pos and of doc, per key tile the min and max of kpos.
// Every kernel's query and key tiles are whole multiples of 64 rows from those origins, so a kernel tile's
// summary is the min / max over the 64-row summaries it covers. A (query tile, key tile) pair is
//   skipped  when kmax < min doc or kmin > max pos (no pair visible),
//   full     when kmin >= max doc and kmax <= min pos (every pair visible: runs unmasked),
//   partial  otherwise (the element mask runs on it).
// Kernels first narrow their loop to the span of non-skipped 64-row tiles (block_tile_span); partial and
// skipped tiles inside the span take the element mask. With documents off `on` is false and the kernels take
// the unmasked path: the hot loops test one uniform flag and load nothing more. Keep C++17.
#pragma once
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/attention_shapes.h"

namespace rt {
namespace cuda {

// Refuses a document-mask position array (q_pos, q_doc_start or k_pos, `name`) that is null or not memory of CUDA
// device `device`, naming the op and the fix (attn_doc_mask.cu).
void require_device_positions(const int64_t* p, int device, const char* op, const char* name);

constexpr int kDocTileRows = 64;  // rows per summary tile

constexpr int kDocRuns = 4;        // runs of one document start kept apart per 128-row query tile
constexpr int kDocLiveMax = 2048;  // fwd v5's live-tile list capacity: a longer span is visited whole

struct DocMaskDev {
  bool on = false;
  const int64_t* q_pos = nullptr;  // (B, q_stride) position of each query row
  const int64_t* q_doc = nullptr;  // (B, q_stride) its document's first position
  const int64_t* k_pos = nullptr;  // (B, k_stride) position of each key row
  int64_t q_stride = 0, k_stride = 0;
  const int64_t* q_sum = nullptr;  // (B, nq_tiles, 4): min pos, max pos, min doc, max doc of rows q_begin + 64t..
  const int64_t* k_sum = nullptr;  // (B, nk_tiles, 2): min kpos, max kpos of keys k_begin + 64t..
  int nq_tiles = 0, nk_tiles = 0;
  // bwd v5 only, written by attn_doc_k128_spans: (B, ceil(nk_tiles / 2)) {first, last} query summary tile with a
  // pair visible to the 128 keys k_begin + 128t.. (first > last: none).
  int2* k128_span = nullptr;
  // fwd v5 only, written by attn_doc_q128_order: per 128-row query tile of each sample (B, ceil(nq_tiles / 2)),
  // the {first, last} key summary tile some row of it sees (first > last: none), and the tiles' launch order,
  // most key summary tiles first.
  int2* q128_span = nullptr;
  int* q128_order = nullptr;
  // and per tile (B, ceil(nq_tiles / 2)) its rows' runs of one document start (doc_live_key_tiles): the number of
  // runs, and (B, ceil(nq_tiles / 2), kDocRuns) {document start, largest position} of each (empty: {max, min}).
  int* q128_nruns = nullptr;
  longlong2* q128_runs = nullptr;
};

// Min / max of positions over a set of rows: query tiles use all four, key tiles pos_lo / pos_hi.
struct DocRange {
  int64_t pos_lo, pos_hi, doc_lo, doc_hi;
};

enum DocTileClass : int { kDocSkip = 0, kDocFull = 1, kDocPartial = 2 };

// Checks the call's document mask (device arrays, strides) and, when it is on, launches the summaries of the
// call's rows on `stream` (attn_doc_mask.cu). Off: returns on = false and launches nothing.
DocMaskDev attn_doc_mask_setup(const AttnDocs& docs, int64_t B, int64_t Nq, int64_t Nk, const AttnRanges& r,
                               int device, cudaStream_t stream, const char* op);

// bwd v5 (attn_bwd_sm90ws.cu): launches on `stream`, after the summaries, the kernel that writes d.k128_span (per
// 128-key tile of each sample, the span of query summary tiles it must visit). d must be on.
void attn_doc_k128_spans(const DocMaskDev& d, int64_t B, cudaStream_t stream);

// fwd v5 (attn_fwd_sm90ws.cu): launches on `stream`, after the summaries, the kernels that write d.q128_span and the
// runs (one warp per 128-row query tile of the call's rows [q_begin, q_end): the scan doc_key_span does, once per
// call) and d.q128_order (one CTA per sample: a counting
// sort of the tiles by span length, longest first, so the longest CTAs start first and the last wave is short
// ones). d must be on.
void attn_doc_q128_order(const DocMaskDev& d, int64_t B, int64_t q_begin, int64_t q_end, cudaStream_t stream);

#ifdef __CUDACC__
// Query summary tiles [t0, t0 + n) of sample b (clipped to the call's tiles).
__device__ __forceinline__ DocRange doc_q_range(const DocMaskDev& d, int64_t b, int t0, int n) {
  DocRange r{LLONG_MAX, LLONG_MIN, LLONG_MAX, LLONG_MIN};
  const int t1 = min(t0 + n, d.nq_tiles);
  for (int t = t0; t < t1; ++t) {
    const int64_t* s = d.q_sum + (b * d.nq_tiles + t) * 4;
    r.pos_lo = min(r.pos_lo, s[0]);
    r.pos_hi = max(r.pos_hi, s[1]);
    r.doc_lo = min(r.doc_lo, s[2]);
    r.doc_hi = max(r.doc_hi, s[3]);
  }
  return r;
}

// Key summary tiles [t0, t0 + n) of sample b (doc_lo / doc_hi unused).
__device__ __forceinline__ DocRange doc_k_range(const DocMaskDev& d, int64_t b, int t0, int n) {
  DocRange r{LLONG_MAX, LLONG_MIN, 0, 0};
  const int t1 = min(t0 + n, d.nk_tiles);
  for (int t = t0; t < t1; ++t) {
    const int64_t* s = d.k_sum + (b * d.nk_tiles + t) * 2;
    r.pos_lo = min(r.pos_lo, s[0]);
    r.pos_hi = max(r.pos_hi, s[1]);
  }
  return r;
}

__device__ __forceinline__ DocTileClass doc_tile_class(const DocRange& q, const DocRange& k) {
  if (k.pos_hi < q.doc_lo || k.pos_lo > q.pos_hi) return kDocSkip;
  if (k.pos_lo >= q.doc_hi && k.pos_hi <= q.pos_lo) return kDocFull;
  return kDocPartial;
}

// lo / hi <- the minimum of lo and the maximum of hi over the warp (every lane gets both).
template <typename T>
__device__ __forceinline__ void warp_min_max(T& lo, T& hi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
}

// The first and last index t in [0, n) with live(t), into red[0] and red[1] (red[0] > red[1] when none);
// red: 2 ints of shared memory. Every thread of the block (nthreads) calls it; it synchronises the block twice.
template <class Live>
__device__ __forceinline__ void block_tile_span(int n, int nthreads, int* red, Live live) {
  if (threadIdx.x == 0) {
    red[0] = INT_MAX;
    red[1] = -1;
  }
  __syncthreads();
  int lo = INT_MAX, hi = -1;
  for (int t = int(threadIdx.x); t < n; t += nthreads)
    if (live(t)) {
      lo = min(lo, t);
      hi = max(hi, t);
    }
  warp_min_max(lo, hi);
  if (threadIdx.x % 32 == 0 && hi >= 0) {
    atomicMin(&red[0], lo);
    atomicMax(&red[1], hi);
  }
  __syncthreads();
}

// The keys a query-stationary CTA (query summary q of sample b) visits within [k_begin, k_end): narrowed to the
// span of key summary tiles not skipped. Returns false when no key is visible. The block synchronises.
__device__ __forceinline__ bool doc_key_span(const DocMaskDev& d, int64_t b, const DocRange& q, int64_t k_begin,
                                             int64_t k_end, int nthreads, int* red, int64_t& k_lo, int64_t& k_hi) {
  block_tile_span(d.nk_tiles, nthreads, red, [&](int t) {
    const int64_t* s = d.k_sum + (b * d.nk_tiles + t) * 2;
    return !(s[1] < q.doc_lo || s[0] > q.pos_hi);
  });
  const int first = red[0], last = red[1];
  if (first > last) return false;
  k_lo = k_begin + int64_t(first) * kDocTileRows;
  k_hi = min(k_end, k_begin + int64_t(last + 1) * kDocTileRows);
  return true;
}

// The query rows a key-stationary CTA (key summary k of sample b) visits within [q_begin, q_end), as
// doc_key_span. Only without deterministic turn counters: those need every key tile to visit every query tile.
__device__ __forceinline__ bool doc_query_span(const DocMaskDev& d, int64_t b, const DocRange& k, int64_t q_begin,
                                               int64_t q_end, int nthreads, int* red, int64_t& q_lo, int64_t& q_hi) {
  block_tile_span(d.nq_tiles, nthreads, red, [&](int t) {
    const int64_t* s = d.q_sum + (b * d.nq_tiles + t) * 4;
    return !(k.pos_hi < s[2] || k.pos_lo > s[1]);
  });
  const int first = red[0], last = red[1];
  if (first > last) return false;
  q_lo = q_begin + int64_t(first) * kDocTileRows;
  q_hi = min(q_end, q_begin + int64_t(last + 1) * kDocTileRows);
  return true;
}

// fwd v5 with documents: the 128-key tiles of a CTA's key span that one of its query rows may see, so that the
// kernel visits only those (a span's first and last tiles are live, but between them a query tile that holds rows
// of two documents far apart in position, as a rank's pieces are, spans every key in between).
// attn_doc_q128_order takes each 128-row query tile's rows as runs of consecutive rows with one document start: a
// run's rows see keys in [its document start, its largest position]. The first kDocRuns - 1 runs keep their own
// range; the rows after them share the last one (the hull), so the test only ever keeps too many tiles, never drops
// a seen one. A tile of one run needs no list (its span is the run's range); a tile of several runs lists the span's
// key tiles (two 64-key summaries each, from k_lo, which lies a whole number of summaries after k_begin) whose key
// range meets one run's range: their offsets from k_lo (in tiles, increasing) into sh.list, returning the count.
// Every thread of the block calls it; it synchronises the block.
struct DocLiveScratch {  // shared memory
  unsigned short list[kDocLiveMax];
  int warp_count[32];
};

template <int kThreads>
__device__ __forceinline__ int doc_live_key_tiles(const DocMaskDev& d, int64_t b, int q_tile, int64_t k_begin,
                                                  int64_t k_lo, int n_span, DocLiveScratch& sh) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "doc_live_key_tiles: whole warps");
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const longlong2* runs = d.q128_runs + (b * ((d.nq_tiles + 1) / 2) + q_tile) * kDocRuns;
  long long lo[kDocRuns], hi[kDocRuns];
#pragma unroll
  for (int i = 0; i < kDocRuns; ++i) {
    const longlong2 r = runs[i];
    lo[i] = r.x, hi[i] = r.y;
  }
  const int st0 = int((k_lo - k_begin) / kDocTileRows);
  int total = 0;
  for (int t0 = 0; t0 < n_span; t0 += kThreads) {
    const int t = t0 + tid;
    bool live = false;
    if (t < n_span) {
      const DocRange k = doc_k_range(d, b, st0 + 2 * t, 2);
#pragma unroll
      for (int i = 0; i < kDocRuns; ++i) live = live || (k.pos_hi >= lo[i] && k.pos_lo <= hi[i]);
    }
    const unsigned m = __ballot_sync(0xffffffffu, live);
    if (t0 > 0) __syncthreads();  // the previous chunk's counts are read
    sh.warp_count[warp] = __popc(m);
    __syncthreads();
    int before = total;
    for (int w = 0; w < kThreads / 32; ++w) {
      const int c = sh.warp_count[w];
      if (w < warp) before += c;
      total += c;
    }
    if (live) sh.list[before + __popc(m & ((1u << lane) - 1u))] = static_cast<unsigned short>(t);
  }
  __syncthreads();
  return total;
}
#endif

}  // namespace cuda
}  // namespace rt
