// bench_doc_ring_steps --scheme gather (included by bench/doc_ring_steps.cu): the gather scheme of
// parallel/schedule/gather_plan.h measured on one GPU. Every rank receives exactly the key rows its queries see (one
// all-to-all-v, not run here) and makes two calls each way:
//   own:      its queries against its own keys (the ring's step-0 call), while the exchange is in flight;
//             forward attn_fwd_whole (out and lse of every row); backward in two parts as RingAttention runs it
//             (parallel/cp/gather_backward.h): part A, own keys [0, m), before the gathered call, and part B, keys
//             [m, n), under the dK/dV return, m from predict_own_bwd_split (parallel/schedule/gather_plan.h: the
//             runtime's rule
//             for one sample; m = 0: one call, part A); each part timed on its own, and the one call too for comparison;
//   gathered: its queries against its gathered rows, in position order, with the document mask (k_pos = their
//             positions); forward gathered_fwd_merge (parallel/cp/gather_forward.h: the call on the query rows
//             [lo, hi) that see a gathered key, then attn_fwd_merge into out / lse; timed together), backward
//             attn_bwd_block_fresh into the gathered dK / dV (which go home in the reverse exchange), dQ accumulating
//             over both calls.
// one launch: its forward as one call over own keys and gathered rows as one key list (after the exchange), and its
//             backward as one call over the same key list (the own call whole), each timed for every rank that
//             receives rows; the ranks whose model picks it (predict_gather_calls' one_fwd / one_bwd, as RingAttention
//             picks per batch) run it in the paths and in the check. Both calls in RingAttention's form, by its rule
//             (parallel/cp/gather_list_form.h): by default the forward attn_fwd_work_list over the call's work list
//             and the backward attn_bwd_work_list over the backward's (parallel/schedule/doc_work_list.h, built on the
//             host as RingAttention builds them, untimed) where the list kernel runs the call
//             (attn_{fwd,bwd}_work_list_runs: sm_90a, D 64 / 128, 128 own and gathered rows; the backward not in
//             deterministic mode), else attn_fwd_whole_two_kv / attn_bwd_block_fresh_two_kv; with RT_ATTN_WORK_LIST=0
//             in the environment the two_kv calls everywhere, as RingAttention then runs them.
// Per rank r, untimed: its gathered rows' positions (kv_gather_positions), their K / V rows copied from the sample's
// K / V into one device buffer, their k_pos on the device. Each call is timed as --timing says (call_ms,
// bench/cuda_bench_util.cuh; the gathered forward after an own forward that writes the out / lse it merges into:
// call_after_ms).
// Paths: compute only, max over ranks of own + gathered each way; with communication, gather_time_from_calls
// (predict_gather_time's formula, parallel/schedule/gather_plan.h) on the measured calls with the stated NVLink model:
// backward max over r of max(A, C_kv) + gathered + max(B, C_dkv); and the same with the one own call (B = 0).
// Side by side (issue 46): wherever the list kernel runs a receiving rank's one-launch forward, it is timed both as
// attn_fwd_work_list and as attn_fwd_whole_two_kv, and their out / lse compared bit for bit (a difference is printed
// and counted, not fatal: the timings stay of the same computation up to rounding). Always with the list on (the
// default); with RT_ATTN_WORK_LIST=0 only with --work-list (compare_list), the paths then keeping two_kv. The
// backward likewise (bench/doc_gather_bwd_list.cuh): attn_bwd_work_list beside attn_bwd_block_fresh_two_kv, dK / dV
// bit for bit and dQ within rounding; always with the list on, with RT_ATTN_WORK_LIST=0 only with --bwd-work-list.
// --deliver model: per receiving rank the one-launch forward with the exchange under it (own-first list, ready flags,
// rows delivered at C_kv by a side stream), and the forward's path with comm taking the best of the three forms per
// rank: bench/doc_gather_deliver.cuh.
// Check: one pass of the scheme (backward: part A, gathered, part B) against one pass of the ring's calls over the
// same rows (out, lse, dQ, and dK / dV with the gathered rows' gradients added home); a mismatch fails the run, the
// timings would be of a wrong scheme.
// The plan and its line: bench/doc_gather_plan.h; the report (stdout and JSON): bench/doc_gather_report.cuh.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "bench/doc_gather_bwd_list.cuh"
#include "bench/doc_gather_deliver.cuh"
#include "bench/doc_gather_plan.h"
#include "bench/doc_gather_row_kernels.cuh"
#include "kernels/attn_doc_plans.h"
#include "kernels/attn_work_list.h"
#include "parallel/cp/gather_backward.h"
#include "parallel/cp/gather_forward.h"
#include "parallel/cp/gather_list_form.h"
#include "parallel/cp/gather_scheme.h"
#include "parallel/schedule/doc_work_list.h"
#include "parallel/schedule/gather_plan.h"

namespace rt::bench {

struct GatherMeasured {
  std::vector<double> own_fwd_ms, got_fwd_ms, own_bwd_ms, got_bwd_ms;  // (cp) each; 0 where a call does not run
  std::vector<double> own_bwd_a_ms, own_bwd_b_ms;  // (cp) the own backward's parts (own_bwd_ms = A + B; B 0 unsplit)
  std::vector<double> own_bwd_one_ms;              // (cp) the own backward as one call (= A where unsplit)
  std::vector<double> one_fwd_ms;  // (cp) the forward in one launch over own + gathered keys (0: receives nothing),
                                   // in RingAttention's form: attn_fwd_work_list where one_fwd_list, else two_kv
  std::vector<char> one_fwd_list;  // (cp) 1 where that launch is attn_fwd_work_list
  bool list_on = true;             // the list where its kernel runs the call (RT_ATTN_WORK_LIST unset or 1)
  std::vector<double> one_bwd_ms;  // (cp) the backward likewise, in RingAttention's form: attn_bwd_work_list where
                                   // one_bwd_list, else attn_bwd_block_fresh_two_kv
  std::vector<char> one_bwd_list;  // (cp) 1 where that launch is attn_bwd_work_list
  // (cp) side by side, where the list kernel runs the call (0: not run): the one-launch forward as attn_fwd_work_list
  // and as attn_fwd_whole_two_kv (one of them one_fwd_ms itself)
  std::vector<double> list_fwd_ms, two_kv_fwd_ms;
  int64_t list_out_mismatch = 0, list_lse_mismatch = 0;  // its out / lse elements whose bits differ from two_kv's
  // Both directions with every rank's separate calls / every receiving rank's one launch.
  RingTimePrediction path_two_calls, path_one_launch;
  RingTimePrediction path;  // gather_time_from_calls on the measured calls: *_compute_us without comm, *_us with
  RingTimePrediction path_one;  // the same with the one own backward call
  // --deliver model (bench/doc_gather_deliver.cuh): (cp) per rank, empty measurements where it receives nothing or
  // the list kernel does not run its call; the forward's path with comm over the three forms.
  bool deliver_on = false;
  std::vector<DeliverRank> deliver;
  DeliverPath deliver_path;
  // (cp) per rank the one-launch backward's two forms side by side (bench/doc_gather_bwd_list.cuh): with the list on
  // (the default) or --bwd-work-list; else empty.
  std::vector<BwdListRank> bwd_list;
  // Check against the ring, max |gather - ring| / max |ring| (lse: max |gather - ring|, natural log).
  double check_lse = 0, check_out = 0, check_dq = 0, check_dk = 0, check_dv = 0;
};

// buf: the sample in ring order (rank r's rows [r n, (r + 1) n)); rp / rs: (N) device positions and document starts
// of those rows, ring_start (N) the same document starts on the host (order holds the positions); ring_mask: the
// ring's calls (the check's reference). list_on: the one-launch forward and backward are attn_fwd_work_list /
// attn_bwd_work_list where their kernels run the call (RingAttention's default; gather_work_list_from_env);
// compare_list: time the forward list beside two_kv with the list off too; deliver: --deliver model
// (bench/doc_gather_deliver.cuh); bwd_list: --bwd-work-list (bench/doc_gather_bwd_list.cuh: the backward's side by side
// with the list off too, and the stages). Throws rt::Error when the check fails.
inline GatherMeasured measure_gather(RingStepBuffers& buf, const GatherBench& g, const std::vector<int64_t>& order,
                                     const std::vector<int64_t>& ring_start, const int64_t* rp, const int64_t* rs,
                                     const RingStepBuffers::StepMask& ring_mask, const RingShape& shape, int warmup,
                                     int reps, CallTiming timing = CallTiming::queued,
                                     AttnDocPlans* plans = nullptr, bool list_on = true, bool compare_list = false,
                                     bool deliver = false, bool bwd_list = false) {
  const KvGatherPlan& plan = g.plan;
  const int cp = plan.cp;
  const int64_t n = plan.n, N = buf.N, H = buf.H, D = buf.D, Hkv = buf.Hkv, kv_width = Hkv * D;
  cudaStream_t stream = cuda::current_stream();
  // The reference: one pass of the ring's calls (forward, then backward into dQ and the sources' dK / dV).
  buf.ring_fwd(cp, n, ring_mask);
  buf.ring_bwd(cp, n, ring_mask);
  DeviceBuffer ref_out(size_t(N * H * D) * 2), ref_lse(size_t(N * H) * 4);  // (1, N, H, D) bf16; (1, H, N) f32
  DeviceBuffer ref_dq(size_t(N * H * D) * 4), ref_dk(size_t(N * kv_width) * 4), ref_dv(size_t(N * kv_width) * 4);
  CUDA_CHECK(cudaMemcpyAsync(ref_out.p, buf.out.p, size_t(N * H * D) * 2, cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(ref_lse.p, buf.lse.p, size_t(N * H) * 4, cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(ref_dq.p, buf.dq.p, size_t(N * H * D) * 4, cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(ref_dk.p, buf.dk.p, size_t(N * kv_width) * 4, cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(ref_dv.p, buf.dv.p, size_t(N * kv_width) * 4, cudaMemcpyDeviceToDevice, stream));
  DeviceBuffer home_dk(size_t(N * kv_width) * 4), home_dv(size_t(N * kv_width) * 4);  // (1, N, Hkv, D) f32: the check's
  fill(buf.dkv(home_dk, N, 0), 0.f);                                                  // dK / dV summed at home
  fill(buf.dkv(home_dv, N, 0), 0.f);

  // Padded as RingAttention pads (gather_call_key_rows): zero K/V at position N past the received rows.
  const int64_t max_rows = std::max<int64_t>(1, gather_call_key_rows(plan.max_recv_rows(), (cp - 1) * n));
  DeviceBuffer gk(size_t(max_rows * kv_width) * 2), gv(size_t(max_rows * kv_width) * 2);    // (1, R, Hkv, D) bf16
  DeviceBuffer gdk(size_t(max_rows * kv_width) * 4), gdv(size_t(max_rows * kv_width) * 4);  // (1, R, Hkv, D) f32
  DeviceBuffer gpos(size_t(max_rows) * 8), gsrc(size_t(max_rows) * 8);  // (R) int64: positions, rows in buf
  const int64_t list_rows = attn_second_kv_row(n) + max_rows;               // the one-launch forward's key list
  DeviceBuffer klist(size_t(list_rows) * 8);  // (S + R) int64: own positions, N in the gap, the gathered rows'
  CUDA_CHECK(cudaMemsetAsync(gk.p, 0, size_t(max_rows * kv_width) * 2, stream));  // padding rows stay zero
  CUDA_CHECK(cudaMemsetAsync(gv.p, 0, size_t(max_rows * kv_width) * 2, stream));
  DeviceBuffer out2(size_t(n * H * D) * 2), lse2(size_t(n * H) * 4);  // (1, n, H, D) bf16, (1, H, n) f32: scratch
  std::vector<int64_t> row_of(static_cast<size_t>(N));  // (N) by position: its row in buf
  for (int64_t i = 0; i < N; ++i) row_of[size_t(order[size_t(i)])] = i;

  GatherMeasured m;
  m.list_on = list_on;
  m.deliver_on = deliver;
  GatherCallTimes us, us_one;  // the measured calls: the own backward in its parts, and as one call
  for (int r = 0; r < cp; ++r) {
    if (plans) plans->new_batch();  // gpos / klist are rewritten with rank r's rows: no earlier plan holds
    const std::vector<int64_t> pos = kv_gather_positions(plan, r);  // (R) in buffer order, increasing
    const int64_t R = int64_t(pos.size()), Rc = gather_call_key_rows(R, (cp - 1) * n);  // received; the call's
    std::vector<int64_t> src(pos.size());  // (R)
    for (size_t i = 0; i < pos.size(); ++i) src[i] = row_of[size_t(pos[i])];
    if (R > 0) {
      std::vector<int64_t> call_pos = pos;  // (Rc): the padding rows at position N, after every query
      call_pos.resize(size_t(Rc), N);
      CUDA_CHECK(cudaMemcpyAsync(gpos.p, call_pos.data(), size_t(Rc) * 8, cudaMemcpyHostToDevice, stream));
      CUDA_CHECK(cudaMemcpyAsync(gsrc.p, src.data(), size_t(R) * 8, cudaMemcpyHostToDevice, stream));
      std::vector<int64_t> list(static_cast<size_t>(attn_second_kv_row(n)), N);  // (S + Rc) the key list
      std::copy(order.begin() + r * n, order.begin() + (r + 1) * n, list.begin());
      list.insert(list.end(), call_pos.begin(), call_pos.end());
      CUDA_CHECK(cudaMemcpyAsync(klist.p, list.data(), list.size() * 8, cudaMemcpyHostToDevice, stream));
      const int64_t* s = static_cast<const int64_t*>(gsrc.p);
      gather_rows_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(gk.p),
                                                   static_cast<const __nv_bfloat16*>(buf.k.p), s, R, kv_width);
      CUDA_CHECK_LAUNCH();
      gather_rows_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(gv.p),
                                                   static_cast<const __nv_bfloat16*>(buf.v.p), s, R, kv_width);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaStreamSynchronize(stream));  // pos and src are freed at the end of this iteration
    }
    const QueryRowRange q_rows = gathered_query_rows(order.data() + r * n, ring_start.data() + r * n, n, pos);
    RT_CHECK(R == 0 || !q_rows.empty(), "bench gather: rank " << r << " receives " << R
                                                              << " rows that no query sees (a plan bug)");
    AttnMask own, got;
    own.docs.q_pos = got.docs.q_pos = rp + r * n;
    own.docs.q_doc_start = got.docs.q_doc_start = rs + r * n;
    own.docs.q_stride = got.docs.q_stride = own.docs.k_stride = N;
    own.docs.k_pos = rp + r * n;
    got.docs.k_pos = static_cast<const int64_t*>(gpos.p);
    got.docs.k_stride = max_rows;
    const Tensor q = buf.bf(buf.q, n, r * n), dout = buf.bf(buf.dout, n, r * n), out = buf.bf(buf.out, n, r * n);
    const Tensor k = buf.kv(buf.k, n, r * n), v = buf.kv(buf.v, n, r * n);
    const Tensor lse = buf.rows(buf.lse, n, r * n), delta = buf.rows(buf.delta, n, r * n);
    const Tensor dq = buf.f32(buf.dq, n, r * n);
    const Tensor dk = buf.dkv(buf.dk, n, r * n), dv = buf.dkv(buf.dv, n, r * n);
    const Tensor gkt = buf.kv(gk, Rc, 0), gvt = buf.kv(gv, Rc, 0);        // (1, Rc, Hkv, D)
    const Tensor gdkt = buf.dkv(gdk, Rc, 0), gdvt = buf.dkv(gdv, Rc, 0);  // (1, Rc, Hkv, D) f32
    AttnState st = buf.rank_state(r, n);
    const Tensor out2t = buf.bf(out2, n, 0), lse2t = buf.rows(lse2, n, 0);  // (1, n, H, D), (1, H, n)
    AttnMask key_list = own;  // the one-launch forward: own keys and the gathered rows as one list
    key_list.docs.k_pos = static_cast<const int64_t*>(klist.p);
    key_list.docs.k_stride = attn_second_kv_row(n) + Rc;
    const bool one_launch = R > 0 && g.one_launch[size_t(r)];  // as RingAttention picks the form
    const bool one_launch_bwd = R > 0 && g.one_launch_bwd[size_t(r)];
    // The one-launch forward's work list (untimed: RingAttention builds it once per set_documents) where the list
    // kernel runs the call and either times it: as the form (list_on) or side by side (compare_list). The forms by
    // RingAttention's rule (parallel/cp/gather_list_form.h).
    const int64_t list_rows = gather_one_launch_key_rows(n, Rc);  // the call's key list: own rows, the gap, Rc gathered
    const bool list_runs = R > 0 && (list_on || compare_list || deliver) &&
                           gather_fwd_list_runs(q.device, DType::bf16, 1, H, D, n, Rc);
    const bool list_form = gather_fwd_list_form(list_on, list_runs);  // the one-launch forward as RingAttention runs it
    // The one-launch backward likewise: its list built (untimed) where the list kernel runs the call and the list is
    // on (the form) or --bwd-work-list asks for the side by side with it off.
    const bool bwd_list_runs = R > 0 && (list_on || bwd_list) &&
                               gather_bwd_list_runs(q.device, DType::bf16, 1, H, Hkv, D, n, Rc);
    const bool bwd_list_form = gather_bwd_list_form(list_on, /*fp8_backward=*/false, bwd_list_runs);
    std::vector<int32_t> words;                   // the list's device form (attn_work_list_words)
    int64_t tasks = 0, slots = 0;                 // slots: the list's merge slots (RT_ATTN_WORK_LIST_SPLIT=1)
    DocWorkListInputs in;  // the call's positions: own keys, the gap at N, the received rows (either list runs)
    if (list_runs || bwd_list_runs) in = gather_call_inputs(order, ring_start, r, n, N, pos, list_rows);
    if (list_runs) {
      int sms = 0;
      CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      const AttnWorkList wlist = doc_work_list(
          in, doc_work_list_split_from_env(H, D, sms, attn_fwd_work_list_head_window(H, Hkv, list_rows, D, 1)));
      words = attn_work_list_words(wlist);
      tasks = int64_t(wlist.tasks.size());
      slots = wlist.merge_slots;
      if (slots > 0) std::printf("  rank %d: work list split into %lld merge slots\n", r, (long long)slots);
    }
    // The split merge's scratch (kernels/attn_work_list.h AttnSplitScratch): state (slots, H, 128, D + 2) f32, count
    // (slots, H, 8) i32 zeroed once.
    DeviceBuffer split_state(size_t(std::max<int64_t>(slots, 1) * H * 128 * (D + 2)) * 4);
    DeviceBuffer split_count(size_t(std::max<int64_t>(slots, 1) * H * 8) * 4);
    CUDA_CHECK(cudaMemsetAsync(split_count.p, 0, size_t(std::max<int64_t>(slots, 1) * H * 8) * 4, stream));
    AttnSplitScratch list_split;
    if (slots > 0)
      list_split = AttnSplitScratch{Tensor(split_state.p, DType::f32, q.device, {slots, H, 128, D + 2}),
                                    Tensor(split_count.p, DType::i32, q.device, {slots, H, 8}), slots};
    DeviceBuffer wl(std::max<size_t>(words.size(), 1) * 4);  // (words) i32, for every call of this rank
    if (!words.empty())
      CUDA_CHECK(cudaMemcpyAsync(wl.p, words.data(), words.size() * 4, cudaMemcpyHostToDevice, stream));
    const Tensor wlt(wl.p, DType::i32, q.device, {int64_t(words.size())});
    auto two_kv_fwd = [&] { attn_fwd_whole_two_kv(q, k, v, gkt, gvt, st, key_list, out, lse); };
    auto list_fwd = [&] { attn_fwd_work_list(q, k, v, gkt, gvt, st, key_list, wlt, tasks, out, lse, list_split); };
    auto one_fwd = [&] {
      if (list_form) list_fwd();
      else two_kv_fwd();
    };
    BwdListWords bwd_words;  // the backward's list (bwd_list_runs) and its device words
    if (bwd_list_runs) bwd_words = bwd_list_words(in, /*stages=*/bwd_list);
    DeviceBuffer bwl(std::max<size_t>(bwd_words.words.size(), 1) * 4);  // (words) i32
    if (!bwd_words.words.empty())
      CUDA_CHECK(cudaMemcpyAsync(bwl.p, bwd_words.words.data(), bwd_words.words.size() * 4, cudaMemcpyHostToDevice,
                                 stream));
    const Tensor bwlt(bwl.p, DType::i32, q.device, {int64_t(bwd_words.words.size())});
    auto two_kv_bwd = [&] {
      attn_bwd_block_fresh_two_kv(q, k, v, gkt, gvt, dout, lse, delta, dq, dk, dv, gdkt, gdvt, key_list);
    };
    auto list_bwd = [&] {
      attn_bwd_work_list(q, k, v, gkt, gvt, dout, lse, delta, dq, dk, dv, gdkt, gdvt, key_list, bwlt);
    };
    auto one_bwd = [&] {
      if (bwd_list_form) list_bwd();
      else two_kv_bwd();
    };
    const bool merge_form = gather_merge_form(R, n);  // as RingAttention picks its form
    auto own_fwd = [&] {
      if (merge_form) attn_fwd_whole(q, k, v, st, own, out, lse);
      else attn_fwd_block_first(q, k, v, st, own);
    };
    auto got_fwd = [&] {
      if (merge_form) gathered_fwd_merge(q, gkt, gvt, got, q_rows, out2t, lse2t, st, out, lse);
      else attn_fwd_block_last(q, gkt, gvt, st, got, out, lse);
    };
    const int64_t split = g.splits[size_t(r)].m;  // the runtime's rule (RingAttention::plan_gather) for this sample
    auto own_bwd_a = [&] { own_bwd_part(OwnBwdPart::a, split, q, k, v, dout, lse, delta, dq, dk, dv, own); };
    auto own_bwd_b = [&] { own_bwd_part(OwnBwdPart::b, split, q, k, v, dout, lse, delta, dq, dk, dv, own); };
    auto own_bwd_one = [&] { attn_bwd_block_fresh(q, k, v, dout, lse, delta, dq, dk, dv, own); };
    auto got_bwd = [&] { attn_bwd_block_fresh(q, gkt, gvt, dout, lse, delta, dq, gdkt, gdvt, got); };
    m.own_fwd_ms.push_back(call_ms(timing, own_fwd, warmup, reps));
    m.got_fwd_ms.push_back(R > 0 ? call_after_ms(timing, own_fwd, got_fwd, warmup, reps) : 0.0);
    m.one_fwd_ms.push_back(R > 0 ? call_ms(timing, one_fwd, warmup, reps) : 0.0);
    m.one_fwd_list.push_back(list_form ? 1 : 0);
    m.list_fwd_ms.push_back(0.0);
    m.two_kv_fwd_ms.push_back(0.0);
    if (list_runs) {  // side by side: the other form timed too (the form's time is one_fwd_ms), and the bits compared
      m.list_fwd_ms.back() = list_form ? m.one_fwd_ms.back() : call_ms(timing, list_fwd, warmup, reps);
      m.two_kv_fwd_ms.back() = list_form ? call_ms(timing, two_kv_fwd, warmup, reps) : m.one_fwd_ms.back();
      std::vector<uint16_t> out_two(size_t(n * H * D)), out_list(out_two.size());  // (n, H, D) bf16 bits
      std::vector<float> lse_two(size_t(H * n)), lse_list(lse_two.size());          // (H, n)
      auto fetch = [&](std::vector<uint16_t>& o, std::vector<float>& l) {
        CUDA_CHECK(cudaMemcpyAsync(o.data(), out.data, o.size() * 2, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaMemcpyAsync(l.data(), lse.data, l.size() * 4, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
      };
      two_kv_fwd();
      fetch(out_two, lse_two);
      list_fwd();
      fetch(out_list, lse_list);
      for (size_t i = 0; i < out_two.size(); ++i) m.list_out_mismatch += out_two[i] != out_list[i];
      for (size_t i = 0; i < lse_two.size(); ++i) m.list_lse_mismatch += std::memcmp(&lse_two[i], &lse_list[i], 4) != 0;
    }
    if (deliver) {  // the one launch with the exchange under it (bench/doc_gather_deliver.cuh)
      DeliverRank d;
      if (list_runs) {
        DeliverCall dc;
        dc.q = q, dc.k = k, dc.v = v, dc.k2 = gkt, dc.v2 = gvt, dc.out = out, dc.lse = lse;
        dc.state = &st;
        dc.mask = key_list;
        dc.in = &in;
        dc.H = H, dc.D = D;
        dc.kv_bytes = size_t(Rc * kv_width) * 2;
        dc.c_kv_us = g.c_kv_us;
        dc.warmup = warmup, dc.reps = std::max(reps, 1);
        dc.reference_fwd = list_fwd;
        const std::string where = "bench deliver rank " + std::to_string(r);
        d = measure_deliver(dc, where.c_str());
      }
      m.deliver.push_back(d);
    }
    // The rank's out and lse, what its backward reads, in its form (so the check covers the one launch too).
    if (one_launch) {
      one_fwd();
    } else {
      own_fwd();
      if (R > 0) got_fwd();
    }
    attn_bwd_delta(out, dout, delta);
    m.own_bwd_a_ms.push_back(call_ms(timing, own_bwd_a, warmup, reps));
    m.own_bwd_b_ms.push_back(split > 0 ? call_ms(timing, own_bwd_b, warmup, reps) : 0.0);
    m.own_bwd_ms.push_back(m.own_bwd_a_ms.back() + m.own_bwd_b_ms.back());
    m.own_bwd_one_ms.push_back(split > 0 ? call_ms(timing, own_bwd_one, warmup, reps) : m.own_bwd_a_ms.back());
    m.got_bwd_ms.push_back(R > 0 ? call_ms(timing, got_bwd, warmup, reps) : 0.0);
    m.one_bwd_ms.push_back(R > 0 ? call_ms(timing, one_bwd, warmup, reps) : 0.0);
    m.one_bwd_list.push_back(bwd_list_form ? 1 : 0);
    if (list_on || bwd_list)  // side by side where the list runs (bench/doc_gather_bwd_list.cuh); overwrites dQ / dK /
                              // dV as the timed calls above do; the check's pass below starts afresh
      m.bwd_list.push_back(bwd_list_runs ? compare_bwd_list(BwdListCompare{dq, dk, dv, gdkt, gdvt, list_bwd, two_kv_bwd,
                                                                           bwd_list_form, m.one_bwd_ms.back(), timing,
                                                                           warmup, reps},
                                                            bwd_words)
                                         : BwdListRank{});
    // The check's pass, in the runtime's order: dQ from zero over the three calls (part A, gathered, part B) or the
    // one launch; dK / dV added home (own rows, then the gathered rows').
    fill(dq, 0.f);
    if (one_launch_bwd) {
      one_bwd();
    } else {
      own_bwd_a();
      if (R > 0) got_bwd();
      own_bwd_b();
    }
    add_rows_kernel<<<1024, 256, 0, stream>>>(static_cast<float*>(home_dk.p), static_cast<const float*>(buf.dk.p) +
                                              r * n * kv_width, nullptr, r * n, n, kv_width);
    CUDA_CHECK_LAUNCH();
    add_rows_kernel<<<1024, 256, 0, stream>>>(static_cast<float*>(home_dv.p), static_cast<const float*>(buf.dv.p) +
                                              r * n * kv_width, nullptr, r * n, n, kv_width);
    CUDA_CHECK_LAUNCH();
    if (R > 0) {
      const int64_t* s = static_cast<const int64_t*>(gsrc.p);
      add_rows_kernel<<<1024, 256, 0, stream>>>(static_cast<float*>(home_dk.p), static_cast<const float*>(gdk.p), s,
                                                0, R, kv_width);
      CUDA_CHECK_LAUNCH();
      add_rows_kernel<<<1024, 256, 0, stream>>>(static_cast<float*>(home_dv.p), static_cast<const float*>(gdv.p), s,
                                                0, R, kv_width);
      CUDA_CHECK_LAUNCH();
    }
    us.own_fwd.push_back(1e3 * m.own_fwd_ms.back());
    us.gathered_fwd.push_back(1e3 * m.got_fwd_ms.back());
    us.own_bwd_a.push_back(1e3 * m.own_bwd_a_ms.back());
    us.own_bwd_b.push_back(1e3 * m.own_bwd_b_ms.back());
    us.gathered_bwd.push_back(1e3 * m.got_bwd_ms.back());
    us.one_fwd.push_back(one_launch ? 1e3 * m.one_fwd_ms.back() : 0.0);
    us.one_bwd.push_back(one_launch_bwd ? 1e3 * m.one_bwd_ms.back() : 0.0);
  }
  GatherCallTimes two = us, all_one = us;  // every rank's separate calls / one launch where it receives
  two.one_fwd.clear();
  two.one_bwd.clear();
  for (int r = 0; r < cp; ++r) {
    all_one.one_fwd[size_t(r)] = 1e3 * m.one_fwd_ms[size_t(r)];
    all_one.one_bwd[size_t(r)] = 1e3 * m.one_bwd_ms[size_t(r)];
  }
  m.path_two_calls = gather_time_from_calls(two, plan, shape);
  m.path_one_launch = gather_time_from_calls(all_one, plan, shape);
  us_one = us;
  for (int r = 0; r < cp; ++r) {
    us_one.own_bwd_a[size_t(r)] = 1e3 * m.own_bwd_one_ms[size_t(r)];
    us_one.own_bwd_b[size_t(r)] = 0;
  }
  m.path = gather_time_from_calls(us, plan, shape);
  if (deliver)
    m.deliver_path = deliver_fwd_path(m.own_fwd_ms, m.got_fwd_ms, m.one_fwd_ms, m.deliver, plan.recv_rows, g.c_kv_us);
  m.path_one = gather_time_from_calls(us_one, plan, shape);

  auto rel = [](std::pair<float, float> d) { return d.second > 0 ? double(d.first) / d.second : double(d.first); };
  m.check_lse = gather_max_abs_diff<float>(buf.lse.p, ref_lse.p, N * H).first;
  m.check_out = rel(gather_max_abs_diff<__nv_bfloat16>(buf.out.p, ref_out.p, N * H * D));
  m.check_dq = rel(gather_max_abs_diff<float>(buf.dq.p, ref_dq.p, N * H * D));
  m.check_dk = rel(gather_max_abs_diff<float>(home_dk.p, ref_dk.p, N * kv_width));
  m.check_dv = rel(gather_max_abs_diff<float>(home_dv.p, ref_dv.p, N * kv_width));
  std::printf("  gather check against the ring's calls: max |diff| lse %.2e; relative to max |ring|: out %.2e, dQ "
              "%.2e, dK %.2e, dV %.2e\n",
              m.check_lse, m.check_out, m.check_dq, m.check_dk, m.check_dv);
  const bool ok = m.check_lse <= 1e-2 && m.check_out <= 5e-2 && m.check_dq <= 5e-2 && m.check_dk <= 5e-2 &&
                  m.check_dv <= 5e-2;  // false on NaN too
  RT_CHECK(ok, "bench_doc_ring_steps --scheme gather: the scheme's results differ from the ring's on the same rows "
               "(tolerance: lse 1e-2, the rest 5e-2 relative); the gathered rows or their positions are wrong, so its "
               "timings would be of another computation");
  return m;
}

}  // namespace rt::bench
