// attn_doc_mask_setup: checks a call's document mask (AttnMask::docs) and writes the 64-row tile summaries the
// kernels classify their tiles with (kernels/cuda/attention/attn_doc_mask.cuh) into a scratch buffer of the call's
// stream. One warp per summary tile: min / max of pos and doc over query rows, of kpos over key rows.
// Inside an AttnDocPlanScope (kernels/attn_doc_plans.h) the set-up goes into the scope's plan of the call's key
// instead, and each part (summaries, bwd v5's key spans, fwd v5's query order) is launched only by the first call
// of the batch that needs it: the other layers' calls, forward and backward, launch no set-up kernel.
#include <map>
#include <mutex>
#include <utility>

#include "kernels/attn_doc_plans.h"
#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attn_doc_mask.cuh"

namespace rt {
namespace cuda {
namespace {

constexpr int kSummaryWarps = 8;
static_assert(kDocTileRows == kAttnDocTileRows && kDocRuns == kAttnDocRuns,
              "attn_doc_mask.cuh and kernels/attn_doc_plans.h disagree on the plan's tiles");

// Tiles [0, B*nq) are query tiles (sample b = w / nq), the rest key tiles.
__global__ void doc_summary_kernel(DocMaskDev d, int64_t B, int64_t q_begin, int64_t q_end, int64_t k_begin,
                                   int64_t k_end, int64_t* q_sum, int64_t* k_sum) {
  const int64_t w = int64_t(blockIdx.x) * kSummaryWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  const int64_t nq = d.nq_tiles, nk = d.nk_tiles;
  if (w >= B * (nq + nk)) return;
  const bool is_q = w < B * nq;
  const int64_t b = is_q ? w / nq : (w - B * nq) / nk;
  const int64_t t = is_q ? w % nq : (w - B * nq) % nk;
  const int64_t row0 = (is_q ? q_begin : k_begin) + t * kDocTileRows;
  const int64_t row_end = min(row0 + kDocTileRows, is_q ? q_end : k_end);
  int64_t p_lo = LLONG_MAX, p_hi = LLONG_MIN, s_lo = LLONG_MAX, s_hi = LLONG_MIN;
  for (int64_t r = row0 + lane; r < row_end; r += 32) {
    const int64_t pos = is_q ? d.q_pos[b * d.q_stride + r] : d.k_pos[b * d.k_stride + r];
    p_lo = min(p_lo, pos);
    p_hi = max(p_hi, pos);
    if (is_q) {
      const int64_t doc = d.q_doc[b * d.q_stride + r];
      s_lo = min(s_lo, doc);
      s_hi = max(s_hi, doc);
    }
  }
  warp_min_max(p_lo, p_hi);
  warp_min_max(s_lo, s_hi);
  if (lane != 0) return;
  if (is_q) {
    int64_t* s = q_sum + (b * nq + t) * 4;
    s[0] = p_lo, s[1] = p_hi, s[2] = s_lo, s[3] = s_hi;
  } else {
    int64_t* s = k_sum + (b * nk + t) * 2;
    s[0] = p_lo, s[1] = p_hi;
  }
}

// One warp per (sample, 128-key tile): the first and last query summary tile that sees one of its keys (the scan
// doc_query_span does inside bwd v4's CTAs, done once per call so that bwd v5's roles read it with one load).
__global__ void doc_k128_span_kernel(DocMaskDev d, int64_t B) {
  const int64_t nk2 = (d.nk_tiles + 1) / 2;
  const int64_t w = int64_t(blockIdx.x) * kSummaryWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (w >= B * nk2) return;
  const int64_t b = w / nk2;
  const DocRange k = doc_k_range(d, b, int(w % nk2) * 2, 2);
  int lo = INT_MAX, hi = -1;
  for (int t = lane; t < d.nq_tiles; t += 32) {
    const int64_t* s = d.q_sum + (b * d.nq_tiles + t) * 4;
    if (!(k.pos_hi < s[2] || k.pos_lo > s[1])) {
      lo = min(lo, t);
      hi = max(hi, t);
    }
  }
  warp_min_max(lo, hi);
  if (lane == 0) d.k128_span[w] = make_int2(lo, hi);
}

// One warp per (sample, 128-row query tile of rows [q_begin, q_end)): the first and last key summary tile some row
// of it sees, and its rows' runs of one document start (doc_live_key_tiles, attn_doc_mask.cuh).
__global__ void doc_q128_span_kernel(DocMaskDev d, int64_t B, int64_t q_begin, int64_t q_end) {
  const int64_t nq2 = (d.nq_tiles + 1) / 2;
  const int64_t w = int64_t(blockIdx.x) * kSummaryWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (w >= B * nq2) return;
  const int64_t b = w / nq2;
  const DocRange q = doc_q_range(d, b, int(w % nq2) * 2, 2);
  int lo = INT_MAX, hi = -1;
  for (int t = lane; t < d.nk_tiles; t += 32) {
    const int64_t* s = d.k_sum + (b * d.nk_tiles + t) * 2;
    if (!(s[1] < q.doc_lo || s[0] > q.pos_hi)) {
      lo = min(lo, t);
      hi = max(hi, t);
    }
  }
  warp_min_max(lo, hi);
  if (lane == 0) d.q128_span[w] = make_int2(lo, hi);
  // The runs, 32 rows at a time: a row starts one when its document start differs from the previous row's.
  const int64_t* q_doc = d.q_doc + b * d.q_stride;
  const int64_t* q_pos = d.q_pos + b * d.q_stride;
  const int64_t row0 = q_begin + (w % nq2) * 128, row1 = min(row0 + 128, q_end);
  long long run_lo[kDocRuns], run_hi[kDocRuns];
#pragma unroll
  for (int i = 0; i < kDocRuns; ++i) run_lo[i] = LLONG_MAX, run_hi[i] = LLONG_MIN;
  int runs = 0;  // runs started before this pass
  for (int64_t r0 = row0; r0 < row1; r0 += 32) {
    const int64_t row = r0 + lane;
    const bool valid = row < row1;
    const int64_t doc = valid ? q_doc[row] : 0, pos = valid ? q_pos[row] : 0;
    const bool start = valid && (row == row0 || q_doc[row - 1] != doc);
    const unsigned starts = __ballot_sync(0xffffffffu, start);
    const int run = min(runs + __popc(starts & (0xffffffffu >> (31 - lane))) - 1, kDocRuns - 1);
#pragma unroll
    for (int i = 0; i < kDocRuns; ++i) {
      long long l = valid && run == i ? doc : LLONG_MAX, h = valid && run == i ? pos : LLONG_MIN;
      warp_min_max(l, h);
      run_lo[i] = min(run_lo[i], l);
      run_hi[i] = max(run_hi[i], h);
    }
    runs += __popc(starts);
  }
  if (lane == 0) {
    d.q128_nruns[w] = runs;
    for (int i = 0; i < kDocRuns; ++i) d.q128_runs[w * kDocRuns + i] = make_longlong2(run_lo[i], run_hi[i]);
  }
}

// One CTA per sample: q128_order[b] <- the sample's 128-row query tiles by span length (key summary tiles),
// longest first (a counting sort over kOrderBuckets lengths; longer spans share the last bucket, ties in any order).
constexpr int kOrderThreads = 1024;
constexpr int kOrderBuckets = 2048;
static_assert(kOrderThreads == 32 * 32 && kOrderBuckets % kOrderThreads == 0, "the order kernel's scan layout");
__global__ void __launch_bounds__(kOrderThreads) doc_q128_order_kernel(DocMaskDev d) {
  __shared__ int count[kOrderBuckets];  // tiles per length bucket, then each bucket's next slot
  const int64_t b = blockIdx.x;
  const int nq2 = (d.nq_tiles + 1) / 2;
  const int2* span = d.q128_span + b * nq2;
  int* order = d.q128_order + b * nq2;
  auto bucket = [&](int t) {  // kOrderBuckets - 1 - length: the longest spans first
    const int2 s = span[t];
    const int len = s.x > s.y ? 0 : s.y - s.x + 1;
    return kOrderBuckets - 1 - min(len, kOrderBuckets - 1);
  };
  for (int i = int(threadIdx.x); i < kOrderBuckets; i += kOrderThreads) count[i] = 0;
  __syncthreads();
  for (int t = int(threadIdx.x); t < nq2; t += kOrderThreads) atomicAdd(&count[bucket(t)], 1);
  __syncthreads();
  {  // exclusive prefix sum over the buckets: each thread owns kPer consecutive ones, a warp scan of the owners'
     // sums, then one of the warps' totals
    constexpr int kPer = kOrderBuckets / kOrderThreads;
    __shared__ int warp_total[kOrderThreads / 32];
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    int own[kPer], sum = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) sum += own[i] = count[threadIdx.x * kPer + i];
    int incl = sum;  // inclusive scan of the owners' sums within the warp
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int x = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += x;
    }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      const int w = warp_total[lane];  // kOrderThreads / 32 == 32 warps
      int wi = w;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, wi, o);
        if (lane >= o) wi += x;
      }
      warp_total[lane] = wi - w;  // exclusive: the warps before
    }
    __syncthreads();
    int run = warp_total[warp] + incl - sum;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      count[threadIdx.x * kPer + i] = run;
      run += own[i];
    }
  }
  __syncthreads();
  for (int t = int(threadIdx.x); t < nq2; t += kOrderThreads) order[atomicAdd(&count[bucket(t)], 1)] = t;
}

// The summaries' scratch buffer of one stream, grown on demand and kept for the process. Per stream, so calls
// on different streams never share one; a later call on the same stream is ordered after the kernels reading it.
int64_t* summary_buffer(cudaStream_t stream, size_t count) {
  static std::mutex mutex;
  static std::map<cudaStream_t, std::pair<int64_t*, size_t>> buffers;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = buffers[stream];
  if (slot.second < count) {
    if (slot.first) {
      CUDA_CHECK(cudaStreamSynchronize(stream));  // earlier kernels of this stream may still read the old one
      CUDA_CHECK(cudaFree(slot.first));
    }
    CUDA_CHECK(cudaMalloc(&slot.first, count * sizeof(int64_t)));
    slot.second = count;
  }
  return slot.first;
}

}  // namespace

void require_device_positions(const int64_t* p, int device, const char* op, const char* name) {
  RT_CHECK(p != nullptr, op << ": the document mask has no " << name
                            << "; set AttnDocs::q_pos, q_doc_start and k_pos together");
  cudaPointerAttributes a{};
  CUDA_CHECK(cudaPointerGetAttributes(&a, p));
  RT_CHECK((a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) && a.device == device,
           op << ": document-mask array " << name << " is not memory of CUDA device " << device
              << "; copy the positions to the device of q first");
}

DocMaskDev attn_doc_mask_setup(const AttnDocs& docs, int64_t B, int64_t Nq, int64_t Nk, const AttnRanges& r,
                               int device, cudaStream_t stream, const char* op) {
  DocMaskDev d;
  if (!docs.on()) return d;
  RT_CHECK(docs.q_stride >= Nq && docs.k_stride >= Nk,
           op << ": document-mask strides q_stride=" << docs.q_stride << " / k_stride=" << docs.k_stride
              << " are below the row counts Nq=" << Nq << " / Nk=" << Nk << "; pass the (B, N) arrays' row lengths");
  const int64_t nq = (r.q_end - r.q_begin + kDocTileRows - 1) / kDocTileRows;
  const int64_t nk = (r.k_end - r.k_begin + kDocTileRows - 1) / kDocTileRows;
  RT_CHECK(nq <= INT_MAX && nk <= INT_MAX, op << ": too many rows for the document-mask summaries");
  d.on = true;
  d.q_pos = docs.q_pos;
  d.q_doc = docs.q_doc_start;
  d.k_pos = docs.k_pos;
  d.q_stride = docs.q_stride;
  d.k_stride = docs.k_stride;
  d.nq_tiles = int(nq);
  d.nk_tiles = int(nk);
  const int64_t tiles = B * (nq + nk);
  if (tiles == 0) return d;
  const AttnDocPlanLayout at = attn_doc_plan_layout(B, nq, nk);
  AttnDocPlanKey key;
  key.stream = stream;
  key.q_pos = docs.q_pos;
  key.q_doc_start = docs.q_doc_start;
  key.k_pos = docs.k_pos;
  key.q_stride = docs.q_stride;
  key.k_stride = docs.k_stride;
  key.B = B;
  key.q_begin = r.q_begin, key.q_end = r.q_end, key.k_begin = r.k_begin, key.k_end = r.k_end;
  AttnDocPlans* plans = current_attn_doc_plans();
  AttnDocPlans::Plan* plan = plans ? plans->find_or_add(device, key, at.words) : nullptr;
  if (!(plan && plan->summaries)) {  // a plan written this batch was checked when it was made
    require_device_positions(docs.q_pos, device, op, "q_pos");
    require_device_positions(docs.q_doc_start, device, op, "q_doc_start");
    require_device_positions(docs.k_pos, device, op, "k_pos");
  }
  int64_t* buf = plan ? plans->storage(*plan) : summary_buffer(stream, size_t(at.words));
  d.q_sum = buf + at.q_sum;
  d.k_sum = buf + at.k_sum;
  d.k128_span = reinterpret_cast<int2*>(buf + at.k128_span);
  d.q128_runs = reinterpret_cast<longlong2*>(buf + at.q128_runs);
  d.q128_span = reinterpret_cast<int2*>(buf + at.q128_span);
  d.q128_order = reinterpret_cast<int*>(buf + at.q128_order);
  d.q128_nruns = reinterpret_cast<int*>(buf + at.q128_nruns);
  if (plan && plan->summaries) return d;  // written by an earlier call of this batch, on this stream
  const int64_t blocks = (tiles + kSummaryWarps - 1) / kSummaryWarps;
  RT_CHECK(blocks <= INT_MAX, op << ": too many document-mask summary tiles (" << tiles << ")");
  doc_summary_kernel<<<unsigned(blocks), kSummaryWarps * 32, 0, stream>>>(d, B, r.q_begin, r.q_end, r.k_begin, r.k_end,
                                                                         buf + at.q_sum, buf + at.k_sum);
  CUDA_CHECK_LAUNCH();
  if (plan) plan->summaries = true;
  return d;
}

void attn_doc_k128_spans(const DocMaskDev& d, int64_t B, cudaStream_t stream) {
  RT_CHECK(d.on && d.k128_span != nullptr, "attn_doc_k128_spans: the document mask is off");
  const int64_t warps = B * ((d.nk_tiles + 1) / 2);
  if (warps == 0) return;
  AttnDocPlans* plans = current_attn_doc_plans();
  AttnDocPlans::Plan* plan = plans ? plans->plan_at(d.q_sum) : nullptr;
  if (plan && plan->k128_spans) return;  // written by an earlier call of this batch
  const int64_t blocks = (warps + kSummaryWarps - 1) / kSummaryWarps;
  RT_CHECK(blocks <= INT_MAX, "attn_bwd_block (v5): too many key tiles for the document spans (" << warps << ")");
  doc_k128_span_kernel<<<unsigned(blocks), kSummaryWarps * 32, 0, stream>>>(d, B);
  CUDA_CHECK_LAUNCH();
  if (plan) plan->k128_spans = true;
}

void attn_doc_q128_order(const DocMaskDev& d, int64_t B, int64_t q_begin, int64_t q_end, cudaStream_t stream) {
  RT_CHECK(d.on && d.q128_span != nullptr, "attn_doc_q128_order: the document mask is off");
  const int64_t warps = B * ((d.nq_tiles + 1) / 2);
  if (warps == 0) return;
  AttnDocPlans* plans = current_attn_doc_plans();
  AttnDocPlans::Plan* plan = plans ? plans->plan_at(d.q_sum) : nullptr;
  // The plan's key holds q_begin / q_end (the summaries' origin), so these are the rows it was made for.
  RT_CHECK(!plan || (plan->key.q_begin == q_begin && plan->key.q_end == q_end),
           "attn_doc_q128_order: query rows [" << q_begin << ", " << q_end << ") are not the plan's");
  if (plan && plan->q128_order) return;  // written by an earlier call of this batch
  const int64_t blocks = (warps + kSummaryWarps - 1) / kSummaryWarps;
  RT_CHECK(blocks <= INT_MAX && B <= INT_MAX,
           "attn_fwd_block (v5): too many query tiles for the document spans (" << warps << ")");
  doc_q128_span_kernel<<<unsigned(blocks), kSummaryWarps * 32, 0, stream>>>(d, B, q_begin, q_end);
  CUDA_CHECK_LAUNCH();
  doc_q128_order_kernel<<<unsigned(B), kOrderThreads, 0, stream>>>(d);
  CUDA_CHECK_LAUNCH();
  if (plan) plan->q128_order = true;
}

}  // namespace cuda
}  // namespace rt
