// bench_doc_ring_steps --scheme gather (included by bench/doc_gather_steps.cuh): the one-launch backward's two forms
// side by side. RingAttention runs that call as attn_bwd_work_list (bwd v5's list mode over doc_bwd_work_list's list,
// the forward's mirrored, built on the host once per batch, untimed here) where the rule of
// parallel/cp/gather_list_form.h says so (RT_ATTN_WORK_LIST unset or 1, the list op runs the call), else as
// attn_bwd_block_fresh_two_kv; measure_gather times the rank's form into the paths (one_bwd_ms) and, per receiving
// rank where the list op runs the call, compare_bwd_list times the other form on the same inputs (the rank's q, own K /
// V, its gathered rows, dout, lse, delta), as --timing says; then each runs once from dQ = 0 (dK / dV NaN-poisoned) and
// their results are compared on the device: dK / dV (own and gathered) bit for bit (the list kernel's claim,
// kernels/cuda/attention/attn_bwd_work_list.cu; a difference is printed and counted, not fatal) and dQ as
// max |list - two_kv| / max |two_kv| (unordered f32 adds in both). Always with the list on (the default); with
// RT_ATTN_WORK_LIST=0 only with --bwd-work-list. --bwd-work-list also counts, per head, the 64-row query stages each
// form runs against the fewest possible (bwd_stage_counts, on the host; --plan-only: print_bwd_list_plan).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "bench/doc_gather_row_kernels.cuh"
#include "kernels/attn_work_list.h"
#include "parallel/schedule/doc_work_list.h"
#include "parallel/schedule/gather_plan.h"

namespace rt::bench {

// The work-list builders' inputs for rank r's one-launch call (B = 1): its n query rows (positions from `order`,
// document starts from `ring_start`, rows [r n, (r + 1) n)), the key list of its own rows, the gap up to
// attn_second_kv_row(n) at position N (no query sees it), its received rows' positions `pos`, padded with N to
// list_rows.
inline DocWorkListInputs gather_call_inputs(const std::vector<int64_t>& order, const std::vector<int64_t>& ring_start,
                                            int r, int64_t n, int64_t N, const std::vector<int64_t>& pos,
                                            int64_t list_rows) {
  DocWorkListInputs in;
  in.B = 1, in.Nq = n, in.Nk = n, in.list_rows = list_rows;
  in.q_pos.assign(order.begin() + r * n, order.begin() + (r + 1) * n);
  in.q_doc_start.assign(ring_start.begin() + r * n, ring_start.begin() + (r + 1) * n);
  in.k_pos.assign(size_t(attn_second_kv_row(n)), N);
  std::copy(order.begin() + r * n, order.begin() + (r + 1) * n, in.k_pos.begin());
  in.k_pos.insert(in.k_pos.end(), pos.begin(), pos.end());
  in.k_pos.resize(size_t(list_rows), N);
  return in;
}

// Per head, the 64-row query stages of a call (B samples of in): as attn_bwd_block_fresh_two_kv runs them (per 128-key
// tile, the 64-row tiles from the first to the last whose [least document start, greatest position] meets the tile's
// [least, greatest] key position over its rows below list_rows, gap and padding rows included: doc_k128_span_kernel's
// test on the summaries), as the list runs them (both 64-row halves of each listed 128-row tile, clipped at Nq), and
// the fewest (the 64-row tiles holding a row that sees a key of the tile).
struct BwdStages {
  int64_t two_kv = 0, list = 0, exact = 0;
};
inline BwdStages bwd_stage_counts(const DocWorkListInputs& in, const AttnBwdWorkList& list) {
  BwdStages c;
  const int64_t n = in.Nq, L = in.list_rows, qs = in.q_stride ? in.q_stride : n, ks = in.k_stride ? in.k_stride : L;
  const int64_t nq = (n + 63) / 64, nk = (L + 127) / 128;
  for (int64_t b = 0; b < in.B; ++b) {
    const int64_t* pos = in.q_pos.data() + b * qs;
    const int64_t* doc = in.q_doc_start.data() + b * qs;
    std::vector<int64_t> doc_lo(size_t(nq), INT64_MAX), pos_hi(size_t(nq), INT64_MIN);  // (nq) summaries
    for (int64_t i = 0; i < n; ++i) {
      doc_lo[size_t(i / 64)] = std::min(doc_lo[size_t(i / 64)], doc[i]);
      pos_hi[size_t(i / 64)] = std::max(pos_hi[size_t(i / 64)], pos[i]);
    }
    for (int64_t t = 0; t < nk; ++t) {
      const auto row = in.k_pos.begin() + b * ks;
      std::vector<int64_t> keys(row + 128 * t, row + std::min(L, 128 * t + 128));  // (<= 128) the tile's positions
      std::sort(keys.begin(), keys.end());
      int64_t first = -1, last = -2;
      for (int64_t q = 0; q < nq; ++q) {
        if (!(keys.back() < doc_lo[size_t(q)] || keys.front() > pos_hi[size_t(q)])) {
          if (first < 0) first = q;
          last = q;
        }
        bool seen = false;
        for (int64_t i = 64 * q; i < std::min(n, 64 * q + 64) && !seen; ++i) {
          const auto k = std::lower_bound(keys.begin(), keys.end(), doc[i]);
          seen = k != keys.end() && *k <= pos[i];
        }
        c.exact += seen;
      }
      c.two_kv += last - first + 1;
    }
  }
  for (const AttnBwdTask& t : list.tasks)
    for (int g = t.first_seg; g < t.first_seg + t.segs; ++g) {
      const AttnQuerySeg& seg = list.segs[size_t(g)];
      const int64_t lo = int64_t(seg.first_tile) * 128, hi = std::min(n, int64_t(seg.first_tile + seg.tiles) * 128);
      c.list += (hi - lo + 63) / 64;
    }
  return c;
}

// --plan-only --bwd-work-list (host only, no GPU): per receiving rank of `plan` (the ring order `order`, its document
// starts ring_start) the backward list's stages per head against two_kv's and the fewest, and their sums over the
// ranks and the most of one rank (the critical path's).
inline void print_bwd_list_plan(const KvGatherPlan& plan, const std::vector<int64_t>& order,
                                const std::vector<int64_t>& ring_start) {
  const int cp = plan.cp;
  const int64_t n = plan.n, N = n * cp;
  BwdStages sum, most;
  std::printf("bwd work list plan (64-row stages per head: list / two_kv / fewest):");
  for (int r = 0; r < cp; ++r) {
    const std::vector<int64_t> pos = kv_gather_positions(plan, r);  // (R) increasing
    if (pos.empty()) continue;
    const int64_t Rc = gather_call_key_rows(int64_t(pos.size()), (cp - 1) * n);
    const DocWorkListInputs in = gather_call_inputs(order, ring_start, r, n, N, pos, attn_second_kv_row(n) + Rc);
    const BwdStages st = bwd_stage_counts(in, doc_bwd_work_list(in));
    std::printf(" r%d %lld/%lld/%lld", r, (long long)st.list, (long long)st.two_kv, (long long)st.exact);
    sum.list += st.list, sum.two_kv += st.two_kv, sum.exact += st.exact;
    most.list = std::max(most.list, st.list), most.two_kv = std::max(most.two_kv, st.two_kv);
    most.exact = std::max(most.exact, st.exact);
  }
  std::printf("\n  sum %lld/%lld/%lld (list / two_kv %.3f), most of one rank %lld/%lld/%lld (%.3f)\n",
              (long long)sum.list, (long long)sum.two_kv, (long long)sum.exact,
              sum.two_kv > 0 ? double(sum.list) / double(sum.two_kv) : 0.0, (long long)most.list,
              (long long)most.two_kv, (long long)most.exact,
              most.two_kv > 0 ? double(most.list) / double(most.two_kv) : 0.0);
}

struct BwdListRank {
  bool runs = false;                  // the list kernel ran this rank's call (else the rest is 0)
  double list_ms = 0, two_kv_ms = 0;  // attn_bwd_work_list / attn_bwd_block_fresh_two_kv (one of them one_bwd_ms)
  int64_t dkv_mismatch = 0;           // dK / dV elements (own and gathered) whose bits differ from two_kv's
  double dq_rel = 0;                  // max |dQ list - dQ two_kv| / max |dQ two_kv| (NaN on a NaN)
  int64_t tasks = 0;                  // the list's tasks
  BwdStages stages;                   // per head (bwd_stage_counts; 0 unless --bwd-work-list asked for them)
};

// A rank's backward list, built on the host as RingAttention builds it once per batch (doc_bwd_work_list: the
// forward's list mirrored): its device words, its tasks, and with `stages` the 64-row stages per head (host time
// O(query tiles x key tiles x 64) per rank, so only when --bwd-work-list asks).
struct BwdListWords {
  std::vector<int32_t> words;  // (words) attn_work_list_words
  int64_t tasks = 0;
  BwdStages stages;
};
inline BwdListWords bwd_list_words(const DocWorkListInputs& in, bool stages) {
  const AttnBwdWorkList list = doc_bwd_work_list(in);
  BwdListWords w;
  w.words = attn_work_list_words(list);
  w.tasks = int64_t(list.tasks.size());
  if (stages) w.stages = bwd_stage_counts(in, list);
  return w;
}

// One rank's two one-launch backward forms side by side: the f32 tensors both write (dq (1,n,H,D), dk / dv
// (1,n,Hkv,D), dk2 / dv2 (1,Rc,Hkv,D); overwritten here), the two forms as calls, and which of them is the rank's form
// in the paths (list_form), already timed: form_ms.
struct BwdListCompare {
  Tensor dq, dk, dv, dk2, dv2;
  std::function<void()> list_bwd, two_kv_bwd;
  bool list_form = true;
  double form_ms = 0;
  CallTiming timing = CallTiming::queued;
  int warmup = 3, reps = 10;
};

// The other form timed as --timing says; then each form run once from dQ = 0 with dK / dV NaN-poisoned (every row
// must be written) and compared on the device: dK / dV bit for bit, dQ as a relative max difference.
inline BwdListRank compare_bwd_list(const BwdListCompare& c, const BwdListWords& w) {
  BwdListRank x;
  x.runs = true;
  x.tasks = w.tasks;
  x.stages = w.stages;
  x.list_ms = c.list_form ? c.form_ms : call_ms(c.timing, c.list_bwd, c.warmup, c.reps);
  x.two_kv_ms = c.list_form ? call_ms(c.timing, c.two_kv_bwd, c.warmup, c.reps) : c.form_ms;
  const Tensor* outs[5] = {&c.dq, &c.dk, &c.dv, &c.dk2, &c.dv2};
  auto once = [&](const std::function<void()>& call) {
    fill(c.dq, 0.f);
    for (int i = 1; i < 5; ++i) fill(*outs[i], std::nanf(""));
    call();
  };
  cudaStream_t stream = cuda::current_stream();
  once(c.two_kv_bwd);
  std::unique_ptr<DeviceBuffer> ref[5];  // two_kv's dq, dk, dv, dk2, dv2: each the shape of its tensor, f32
  for (int i = 0; i < 5; ++i) {
    ref[i] = std::make_unique<DeviceBuffer>(size_t(std::max<int64_t>(outs[i]->numel(), 1)) * 4);
    CUDA_CHECK(cudaMemcpyAsync(ref[i]->p, outs[i]->data, size_t(outs[i]->numel()) * 4, cudaMemcpyDeviceToDevice,
                               stream));
  }
  once(c.list_bwd);
  for (int i = 1; i < 5; ++i) x.dkv_mismatch += gather_bit_mismatches(outs[i]->data, ref[i]->p, outs[i]->numel());
  const std::pair<float, float> dq = gather_max_abs_diff<float>(c.dq.data, ref[0]->p, c.dq.numel());
  x.dq_rel = std::isnan(dq.first) ? NAN : dq.second > 0 ? double(dq.first) / dq.second : double(dq.first);
  return x;
}

inline bool bwd_list_has_stages(const std::vector<BwdListRank>& ranks) {  // --bwd-work-list counted them
  return std::any_of(ranks.begin(), ranks.end(), [](const BwdListRank& x) { return x.stages.two_kv > 0; });
}

// The stdout lines, where a rank ran the list: per rank the two forms' times (and the stages where counted), the most
// of one rank each, the bits.
inline void print_bwd_list(const std::vector<BwdListRank>& ranks) {
  if (std::none_of(ranks.begin(), ranks.end(), [](const BwdListRank& x) { return x.runs; })) return;
  double list_max = 0, two_max = 0, dq_worst = 0;
  int64_t mismatch = 0;
  const bool stages = bwd_list_has_stages(ranks);
  std::printf("  work list bwd (attn_bwd_work_list / attn_bwd_block_fresh_two_kv ms%s):",
              stages ? "; 64-row stages per head list / two_kv / fewest" : "");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const BwdListRank& x = ranks[r];
    if (!x.runs) continue;
    std::printf(" r%zu %.3f/%.3f", r, x.list_ms, x.two_kv_ms);
    if (stages)
      std::printf(" (%lld/%lld/%lld)", (long long)x.stages.list, (long long)x.stages.two_kv,
                  (long long)x.stages.exact);
    list_max = std::max(list_max, x.list_ms);
    two_max = std::max(two_max, x.two_kv_ms);
    mismatch += x.dkv_mismatch;
    dq_worst = std::isnan(x.dq_rel) || std::isnan(dq_worst) ? NAN : std::max(dq_worst, x.dq_rel);
  }
  std::printf("\n  work list bwd max over ranks %.3f ms vs %.3f ms (%.3fx); dK / dV bits differing from two_kv: "
              "%lld%s; dQ max |diff| / max |two_kv| %.2e%s\n",
              list_max, two_max, two_max > 0 ? list_max / two_max : 0.0, (long long)mismatch,
              mismatch > 0 ? "  <-- NOT BITWISE EQUAL" : "", dq_worst,
              std::isnan(dq_worst) || dq_worst > 1e-3 ? "  <-- dQ DIFFERS" : "");
}

// JSON members (after a leading comma): per rank (0 where the list kernel did not run the call), the stages where
// counted; none where no rank ran it.
inline void json_bwd_list(FILE* json, const std::vector<BwdListRank>& ranks) {
  if (std::none_of(ranks.begin(), ranks.end(), [](const BwdListRank& x) { return x.runs; })) return;
  std::string list_ms = "[", two_ms = "[", bits = "[", dq = "[", stages = "[";
  char cell[48];
  for (size_t r = 0; r < ranks.size(); ++r) {
    const char* sep = r ? "," : "";
    std::snprintf(cell, sizeof(cell), "%s%.4f", sep, ranks[r].list_ms), list_ms += cell;
    std::snprintf(cell, sizeof(cell), "%s%.4f", sep, ranks[r].two_kv_ms), two_ms += cell;
    std::snprintf(cell, sizeof(cell), "%s%lld", sep, (long long)ranks[r].dkv_mismatch), bits += cell;
    std::snprintf(cell, sizeof(cell), "%s%.3e", sep, std::isnan(ranks[r].dq_rel) ? -1.0 : ranks[r].dq_rel), dq += cell;
    const BwdStages& st = ranks[r].stages;
    std::snprintf(cell, sizeof(cell), "%s[%lld,%lld,%lld]", sep, (long long)st.list, (long long)st.two_kv,
                  (long long)st.exact), stages += cell;
  }
  std::fprintf(json, ",\"work_list_bwd_ms\":%s],\"two_kv_bwd_ms\":%s],\"work_list_bwd_dkv_bit_mismatches\":%s],"
                     "\"work_list_bwd_dq_rel\":%s]",
               list_ms.c_str(), two_ms.c_str(), bits.c_str(), dq.c_str());
  if (bwd_list_has_stages(ranks))
    std::fprintf(json, ",\"work_list_bwd_stages_list_two_kv_fewest\":%s]", stages.c_str());
}

}  // namespace rt::bench
