// bench_doc_ring_steps --scheme gather --deliver model (included by bench/doc_gather_steps.cuh; issue 46,
// bench/NOTES.md "ready flags"): per receiving rank, its one-launch forward WITH the K/V exchange under it, on one GPU.
// The list is the own-first order (parallel/schedule/doc_work_list.h doc_work_list_ordered own_first: own work first,
// mixed query tiles cut into an own part and a gathered part, merged in part order), launched at t = 0 under ready
// flags (kernels/attn_ready_flags.h); a delivery plays the exchange by raising the flag at the NVLink model's exchange
// time C_kv (GatherBench::c_kv_us, the same gather_exchange_us the paths charge). The gathered rows (k2, v2) are
// staged in place before the run: the first form also poisoned them and copied them back from t = 0 with
// cudaMemcpyAsync device to device, but on the H200 (job 8 of 2026-12-04) that copy ran on SMs, which the waiting
// units held: the flag rose 200-270 us late on the short mix and never (the watchdog's error) on the others. The rows'
// own landing is tested on one GPU in tests/gpu/test_cuda_attn_work_list_flags.cpp (a resident harness kernel writes
// them, then the flag). The time from t = 0 to the list kernel's end is the rank's forward-with-comm candidate
// "delivered" (the other two: two calls, max(own, C_kv) + gathered; one launch, C_kv + the launch).
//
// One timed run, in stream order (main = the op's stream; s1 a side stream, non-blocking):
//   main: a 1-thread gate kernel that waits until the host has enqueued everything below (a host-mapped word, so no
//         host enqueue gap lies inside the timing), event e0, a 1-thread stamp kernel (writes %globaltimer as t = 0,
//         then the run's epoch with st.release), event e_stamp, the list kernel with flags, event e1;
//   s1:   (launched first, before the gate, so that it is resident before the list kernel takes every SM) a 1-thread
//         delay kernel: waits for the stamp's epoch, then spins on %globaltimer (__nanosleep between reads) until
//         t = C_kv; then cudaMemcpyAsync of the epoch from pinned host memory into ready[0] (the copy engine: no SM),
//         event e_flag.
// The flag rises at C_kv after t = 0 plus the copy's latency (flag_us, printed). Measured: e0 -> e1 (median of --reps
// runs after --warmup), each run alone (the device synchronized between runs): it holds the stamp kernel (~2-3 us: a
// launch) on top of the list. Beside it, timed the same way: the same list with the flag preset (ready = epoch
// before the gate: no wait anywhere), with the list kernel's head window set to every head (below) and with its
// default window (the L2 rule), so the delivered time reads against a compute-only time of the same method.
//
// The head window: the list kernel runs its units window-major (attn_fwd_work_list.cuh: windows of W heads, each over
// every task), so the own-first order holds across the launch only when W = H; this mode sets
// AttnVariantOverride::fwd_doc_l2_kb to its largest value around its calls (W = H) and restores it after. What that
// costs in L2 reuse is the preset pair's difference (window H against the default).
//
// How much the delivery perturbs the measurement: the delay kernel is one thread on one SM for C_kv: when a list CTA
// (a full SM's registers / shared memory) cannot share that SM, the list has 131 of 132 SMs until C_kv, <= 0.8% of its
// throughput over that span (its __nanosleep loop issues almost nothing); the gate and stamp kernels run before the
// list starts (the stamp inside the timing, ~2-3 us). The rows' HBM writes of a real exchange are not played.
// Bits: the delivered result (out, lse) is compared bit for bit with the preset result (the flags change when a tile
// is loaded, never what is computed), counted and printed; and with the heaviest-first list's (within rounding: the
// cut tiles merge two parts). A watchdog fault (the flag not seen within 1 s) is caught, printed with its message, and
// the rank's delivered candidate is left out (0).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_bench_util.cuh"
#include "kernels/attn_ready_flags.h"
#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_variant.h"
#include "parallel/schedule/doc_work_list.h"

namespace rt::bench {

__device__ __forceinline__ unsigned long long deliver_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits until the host's go word reaches `epoch` (at most 2 s, then goes anyway).
__global__ void deliver_gate_kernel(const volatile unsigned* go, unsigned epoch) {
  const unsigned long long t0 = deliver_now_ns();
  while (*go != epoch && deliver_now_ns() - t0 < 2000000000ull) __nanosleep(200);
}

// stamp (2) u64: [0] t = 0 of the run (%globaltimer ns), [1] the run's epoch, released after [0].
__global__ void deliver_stamp_kernel(unsigned long long* stamp, unsigned long long epoch) {
  stamp[0] = deliver_now_ns();
  __threadfence();
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(stamp + 1), "l"(epoch) : "memory");
}

// Waits for the stamp of `epoch` (at most 2 s: *late = 1), then until t = 0 + delay_ns.
__global__ void deliver_delay_kernel(const unsigned long long* stamp, unsigned long long epoch,
                                     unsigned long long delay_ns, unsigned* late) {
  const unsigned long long t_wait = deliver_now_ns();
  unsigned long long e = 0;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(e) : "l"(stamp + 1) : "memory");
    if (e == epoch) break;
    if (deliver_now_ns() - t_wait > 2000000000ull) {
      *late = 1;
      return;
    }
    __nanosleep(200);
  }
  const unsigned long long t0 = *static_cast<const volatile unsigned long long*>(stamp);
  while (deliver_now_ns() < t0 + delay_ns) __nanosleep(500);
}

// One receiving rank's measurements (0: not measured).
struct DeliverRank {
  double deliver_ms = 0;        // median, e0 -> e1 with the rows and the flag delivered at C_kv
  double preset_ms = 0;         // the same list, flag preset, head window H
  double preset_default_ms = 0; // flag preset, the kernel's default head window
  double flag_us = 0;           // median e0 -> the flag's copy's end
  int64_t out_mismatch = -1, lse_mismatch = -1;  // delivered vs preset, elements whose bits differ
  double rel_vs_list = -1;      // max |delivered - heaviest-first list| / max |list| over out (bf16 as float)
  int64_t tasks = 0, own_tasks = 0, slots = 0;  // the own-first list: tasks, those before the first gathered one, slots
  std::string fault;            // a watchdog fault's message ("" none)
};

// The rank's call as measure_gather holds it. k2 / v2 point at the gathered rows' buffers (kv_bytes each, what the
// list reads), already holding the rows (left in place: only the flag is delivered).
struct DeliverCall {
  Tensor q, k, v, k2, v2, out, lse;  // out (1, n, H, D) bf16, lse (1, H, n) f32
  AttnState* state = nullptr;
  AttnMask mask;                     // the key list's mask (own rows, the gap, the gathered rows)
  const DocWorkListInputs* in = nullptr;
  int64_t H = 0, D = 0;
  size_t kv_bytes = 0;               // bytes of k2 and of v2 (Rc rows x Hkv x D bf16)
  double c_kv_us = 0;                // the exchange's time: the flag's delay
  int warmup = 3, reps = 10;
  std::function<void()> reference_fwd;  // writes out / lse with the heaviest-first list (the comparison's reference)
};

inline DeliverRank measure_deliver(const DeliverCall& c, const char* where) {
  DeliverRank res;
  cudaStream_t main = cuda::current_stream();
  const Device dev = c.q.device;
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const AttnWorkList list =
      doc_work_list_ordered(*c.in, DocWorkListOrder::own_first, doc_work_list_split_for(c.H, c.D, sms, c.H));
  const std::vector<int32_t> words = attn_work_list_words(list);
  res.tasks = int64_t(list.tasks.size());
  res.own_tasks = int64_t(doc_work_list_phases(list).first_gathered);
  res.slots = list.merge_slots;
  const int64_t slots = std::max<int64_t>(1, list.merge_slots);
  DeviceBuffer wl(words.size() * 4);                                        // (words) i32
  DeviceBuffer split_state(size_t(slots * c.H * 128 * (c.D + 2)) * 4);      // (slots, H, 128, D + 2) f32
  DeviceBuffer split_count(size_t(slots * c.H * 8) * 4);                    // (slots, H, 8) i32, zero between calls
  DeviceBuffer ready_buf(16), fault_buf(16), stamp_buf(16), late_buf(16);  // (1) i32; (2) i32; (2) u64; (1) u32
  CUDA_CHECK(cudaMemcpyAsync(wl.p, words.data(), words.size() * 4, cudaMemcpyHostToDevice, main));
  CUDA_CHECK(cudaMemsetAsync(split_count.p, 0, size_t(slots * c.H * 8) * 4, main));
  for (DeviceBuffer* b : {&ready_buf, &fault_buf, &stamp_buf, &late_buf}) CUDA_CHECK(cudaMemsetAsync(b->p, 0, 16, main));
  const Tensor wlt(wl.p, DType::i32, dev, {int64_t(words.size())});
  AttnSplitScratch split;
  if (list.merge_slots > 0)
    split = AttnSplitScratch{Tensor(split_state.p, DType::f32, dev, {slots, c.H, 128, c.D + 2}),
                             Tensor(split_count.p, DType::i32, dev, {slots, c.H, 8}), slots};
  AttnReadyFlags flags;
  flags.ready = Tensor(ready_buf.p, DType::i32, dev, {1});
  flags.fault = Tensor(fault_buf.p, DType::i32, dev, {2});
  flags.timeout_s = 1.0;
  // Pinned host words: the epochs the flag copies read (one per run, never rewritten while a copy may read it) and
  // the gate's go word (mapped).
  const int runs = 4 * (c.warmup + c.reps) + 8;
  unsigned* epochs = nullptr;  // (runs) u32, epochs[i] = i + 1
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&epochs), size_t(runs) * 4, cudaHostAllocDefault));
  for (int i = 0; i < runs; ++i) epochs[i] = unsigned(i + 1);
  unsigned* go_host = nullptr;  // (1) u32, mapped
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&go_host), 4, cudaHostAllocMapped));
  *static_cast<volatile unsigned*>(go_host) = 0;
  unsigned* go_dev = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&go_dev), go_host, 0));
  cudaStream_t s1 = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, e_stamp, e_flag;
  for (cudaEvent_t* e : {&e0, &e1, &e_stamp, &e_flag}) CUDA_CHECK(cudaEventCreate(e));
  const cuda::AttnVariantOverride saved = cuda::attn_variant_override();
  int run = 0;  // the next run's index: its epoch is epochs[run]
  const unsigned long long delay_ns = (unsigned long long)(std::max(0.0, c.c_kv_us) * 1e3);

  // One run: deliver (rows poisoned, delivered at C_kv) or preset (flag raised before the gate). Returns e0 -> e1 ms,
  // flag_us the e0 -> e_flag time (deliver).
  auto one_run = [&](bool deliver, double* flag_us) {
    RT_CHECK(run < runs, where << ": more deliver runs than epochs");
    const unsigned epoch = epochs[run];
    flags.epoch = epoch;
    if (deliver) {
      // The rows stay in place: only the flag is delivered (the header says why).
      deliver_delay_kernel<<<1, 1, 0, s1>>>(static_cast<const unsigned long long*>(stamp_buf.p), epoch, delay_ns,
                                            static_cast<unsigned*>(late_buf.p));
      CUDA_CHECK_LAUNCH();
    } else {
      CUDA_CHECK(cudaMemcpyAsync(ready_buf.p, &epochs[run], 4, cudaMemcpyHostToDevice, main));
    }
    deliver_gate_kernel<<<1, 1, 0, main>>>(go_dev, epoch);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaEventRecord(e0, main));
    deliver_stamp_kernel<<<1, 1, 0, main>>>(static_cast<unsigned long long*>(stamp_buf.p), epoch);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaEventRecord(e_stamp, main));
    attn_fwd_work_list(c.q, c.k, c.v, c.k2, c.v2, *c.state, c.mask, wlt, res.tasks, c.out, c.lse, split, flags);
    CUDA_CHECK(cudaEventRecord(e1, main));
    if (deliver) {
      CUDA_CHECK(cudaMemcpyAsync(ready_buf.p, &epochs[run], 4, cudaMemcpyHostToDevice, s1));  // after the delay
      CUDA_CHECK(cudaEventRecord(e_flag, s1));
    }
    *static_cast<volatile unsigned*>(go_host) = epoch;  // everything is enqueued: the gate opens
    ++run;
    CUDA_CHECK(cudaStreamSynchronize(main));
    CUDA_CHECK(cudaStreamSynchronize(s1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (deliver && flag_us) {
      float f = 0;
      CUDA_CHECK(cudaEventElapsedTime(&f, e0, e_flag));
      *flag_us = 1e3 * double(f);
    }
    unsigned late = 0;
    CUDA_CHECK(cudaMemcpy(&late, late_buf.p, 4, cudaMemcpyDeviceToHost));
    RT_CHECK(late == 0, where << ": the delay kernel never saw the stamp kernel's epoch (the streams did not overlap)");
    attn_ready_fault_check(flags, where);  // a watchdog fault raises here, with its message
    return double(ms);
  };
  auto median_of = [&](bool deliver, double* flag_us) {
    for (int i = 0; i < c.warmup; ++i) one_run(deliver, nullptr);
    std::vector<double> t, f;
    for (int i = 0; i < c.reps; ++i) {
      double fu = 0;
      t.push_back(one_run(deliver, &fu));
      f.push_back(fu);
    }
    std::sort(t.begin(), t.end());
    std::sort(f.begin(), f.end());
    if (flag_us) *flag_us = f[f.size() / 2];
    return t[t.size() / 2];
  };
  const size_t out_n = size_t(c.out.numel()), lse_n = size_t(c.lse.numel());
  std::vector<uint16_t> out_preset(out_n), out_got(out_n), out_ref(out_n);  // (n, H, D) bf16 bits
  std::vector<float> lse_preset(lse_n), lse_got(lse_n);                      // (H, n)
  auto fetch = [&](std::vector<uint16_t>& o, std::vector<float>* l) {
    CUDA_CHECK(cudaMemcpyAsync(o.data(), c.out.data, out_n * 2, cudaMemcpyDeviceToHost, main));
    if (l) CUDA_CHECK(cudaMemcpyAsync(l->data(), c.lse.data, lse_n * 4, cudaMemcpyDeviceToHost, main));
    CUDA_CHECK(cudaStreamSynchronize(main));
  };
  auto poison_out = [&] {
    CUDA_CHECK(cudaMemsetAsync(c.out.data, 0xff, out_n * 2, main));
    CUDA_CHECK(cudaMemsetAsync(c.lse.data, 0xff, lse_n * 4, main));
  };
  try {
    cuda::AttnVariantOverride every_head = saved;
    every_head.fwd_doc_l2_kb = 1 << 30;  // the window holds every head: own-first across the launch
    cuda::set_attn_variant_override(every_head);
    res.preset_ms = median_of(false, nullptr);
    res.deliver_ms = median_of(true, &res.flag_us);
    poison_out();
    one_run(false, nullptr);
    fetch(out_preset, &lse_preset);
    poison_out();
    one_run(true, nullptr);
    fetch(out_got, &lse_got);
    res.out_mismatch = res.lse_mismatch = 0;
    for (size_t i = 0; i < out_n; ++i) res.out_mismatch += out_preset[i] != out_got[i];
    for (size_t i = 0; i < lse_n; ++i) res.lse_mismatch += std::memcmp(&lse_preset[i], &lse_got[i], 4) != 0;
    cuda::set_attn_variant_override(saved);
    res.preset_default_ms = median_of(false, nullptr);
    if (c.reference_fwd) {
      poison_out();
      c.reference_fwd();
      fetch(out_ref, nullptr);
      auto as_float = [](uint16_t b) {
        const uint32_t u = uint32_t(b) << 16;
        float x;
        std::memcpy(&x, &u, 4);
        return x;
      };
      double diff = 0, ref = 0;
      bool nan = false;
      for (size_t i = 0; i < out_n; ++i) {
        const float a = as_float(out_got[i]), b = as_float(out_ref[i]);
        nan |= std::isnan(a) || std::isnan(b);
        diff = std::max(diff, double(std::fabs(a - b)));
        ref = std::max(ref, double(std::fabs(b)));
      }
      res.rel_vs_list = nan ? std::numeric_limits<double>::quiet_NaN() : ref > 0 ? diff / ref : diff;
    }
  } catch (const Error& e) {
    res.fault = e.what();
    res.deliver_ms = 0;
    std::printf("  %s: the delivered forward failed: %s\n", where, e.what());
  }
  cuda::set_attn_variant_override(saved);
  // Leave the rows in place for the calls after this one.
  CUDA_CHECK(cudaStreamSynchronize(s1));
  CUDA_CHECK(cudaStreamSynchronize(main));
  for (cudaEvent_t e : {e0, e1, e_stamp, e_flag}) CUDA_CHECK(cudaEventDestroy(e));
  CUDA_CHECK(cudaStreamDestroy(s1));
  CUDA_CHECK(cudaFreeHost(epochs));
  CUDA_CHECK(cudaFreeHost(go_host));
  return res;
}

// The forward's critical path with communication taking, per rank, the best of its three forms: 't' two calls
// (max(own, C_kv) + gathered; own alone where the rank receives nothing), 'o' one launch after the exchange (C_kv +
// the launch, where timed), 'd' delivered (the launch with the exchange under it, where measured).
struct DeliverPath {
  std::vector<double> two_ms, one_ms, delivered_ms;  // (cp) each candidate, 0 where the form does not exist
  std::string forms;                                  // (cp) the form each rank takes
  double path_ms = 0;                                 // max over ranks of the best
};

inline DeliverPath deliver_fwd_path(const std::vector<double>& own_ms, const std::vector<double>& got_ms,
                                    const std::vector<double>& one_ms, const std::vector<DeliverRank>& deliver,
                                    const std::vector<int64_t>& recv_rows, double c_kv_us) {
  DeliverPath p;
  const double c = c_kv_us * 1e-3;
  for (size_t r = 0; r < own_ms.size(); ++r) {
    const bool receives = recv_rows[r] > 0;
    const double two = (receives ? std::max(own_ms[r], c) : own_ms[r]) + got_ms[r];
    const double one = one_ms[r] > 0 ? c + one_ms[r] : 0.0;
    const double del = r < deliver.size() ? deliver[r].deliver_ms : 0.0;
    p.two_ms.push_back(two);
    p.one_ms.push_back(one);
    p.delivered_ms.push_back(del);
    double best = two;
    char form = 't';
    if (one > 0 && one < best) best = one, form = 'o';
    if (del > 0 && del < best) best = del, form = 'd';
    p.forms += form;
    p.path_ms = std::max(p.path_ms, best);
  }
  return p;
}

inline void print_deliver_result(const DeliverPath& p, const std::vector<DeliverRank>& d, double c_kv_us,
                                 double whole_fwd_ms) {
  const int cp = int(p.two_ms.size());
  std::printf("  deliver model (own-first list launched at t = 0, rows and flag at C_kv = %.1f us; head window H):\n",
              c_kv_us);
  int64_t out_bad = 0, lse_bad = 0;
  for (int r = 0; r < cp; ++r) {
    const DeliverRank& x = d[size_t(r)];
    if (x.tasks == 0) continue;
    std::printf("    rank %d: delivered %8.3f ms (flag at %.1f us) | preset %8.3f ms, default window %8.3f ms | list %ld "
                "tasks, %ld own first, %ld merge slots | bits vs preset: out %lld lse %lld%s | vs heaviest-first "
                "list %.2e%s%s\n",
                r, x.deliver_ms, x.flag_us, x.preset_ms, x.preset_default_ms, long(x.tasks), long(x.own_tasks),
                long(x.slots), (long long)x.out_mismatch, (long long)x.lse_mismatch,
                x.out_mismatch + x.lse_mismatch > 0 ? "  <-- NOT BITWISE EQUAL" : "", x.rel_vs_list,
                x.fault.empty() ? "" : "  FAULT: ", x.fault.c_str());
    out_bad += std::max<int64_t>(0, x.out_mismatch);
    lse_bad += std::max<int64_t>(0, x.lse_mismatch);
  }
  std::printf("  forward with comm per rank (two calls / one launch / delivered ms, [form taken]):");
  for (int r = 0; r < cp; ++r)
    std::printf(" r%d %.3f/%.3f/%.3f[%c]", r, p.two_ms[size_t(r)], p.one_ms[size_t(r)], p.delivered_ms[size_t(r)],
                p.forms[size_t(r)]);
  std::printf("\n  forward with comm, the best form per rank (t two calls, o one launch, d delivered: %s): %.3f ms, "
              "efficiency %.3f; delivered bits differing from preset: out %lld, lse %lld%s\n",
              p.forms.c_str(), p.path_ms, p.path_ms > 0 ? whole_fwd_ms / (cp * p.path_ms) : 0.0, (long long)out_bad,
              (long long)lse_bad, out_bad + lse_bad > 0 ? "  <-- NOT BITWISE EQUAL" : "");
}

inline void json_deliver(FILE* json, const DeliverPath& p, const std::vector<DeliverRank>& d, double whole_fwd_ms) {
  auto list = [](const std::vector<double>& xs) {
    std::string s = "[";
    char cell[32];
    for (size_t i = 0; i < xs.size(); ++i) std::snprintf(cell, sizeof(cell), "%s%.4f", i ? "," : "", xs[i]), s += cell;
    return s + "]";
  };
  std::vector<double> preset, preset_default, flag;
  int64_t out_bad = 0, lse_bad = 0, faults = 0;
  for (const DeliverRank& x : d) {
    preset.push_back(x.preset_ms);
    preset_default.push_back(x.preset_default_ms);
    flag.push_back(x.flag_us);
    out_bad += std::max<int64_t>(0, x.out_mismatch);
    lse_bad += std::max<int64_t>(0, x.lse_mismatch);
    faults += !x.fault.empty();
  }
  const int cp = int(p.two_ms.size());
  std::fprintf(json,
               ",\"deliver\":\"model\",\"fwd_comm_two_calls_ms\":%s,\"fwd_comm_one_launch_ms\":%s,"
               "\"fwd_comm_delivered_ms\":%s,\"fwd_comm_form\":\"%s\",\"path_comm_fwd_best_ms\":%.4f,"
               "\"eff_comm_fwd_best\":%.4f,\"deliver_preset_ms\":%s,\"deliver_preset_default_window_ms\":%s,"
               "\"deliver_flag_us\":%s,\"deliver_out_bit_mismatches\":%lld,\"deliver_lse_bit_mismatches\":%lld,"
               "\"deliver_faults\":%lld",
               list(p.two_ms).c_str(), list(p.one_ms).c_str(), list(p.delivered_ms).c_str(), p.forms.c_str(),
               p.path_ms, p.path_ms > 0 ? whole_fwd_ms / (cp * p.path_ms) : 0.0, list(preset).c_str(),
               list(preset_default).c_str(), list(flag).c_str(), (long long)out_bad, (long long)lse_bad,
               (long long)faults);
}

}  // namespace rt::bench
