// attn_fwd_work_list's persistent form with ready flags (kernels/attn_ready_flags.h "Deadlock";
// kernels/cuda/attention/attn_fwd_work_list_persistent.cuh): fewer CTAs than units, M = free_sms SMs left free, the
// units taken in list order from a counter. One GPU; a case with many units (B = 2, H = 32, Hkv = 4, D = 128, own rows
// 2 x 1024 of 8192, random documents: 32 tasks x 32 heads, far more units than SMs) and the own-first list
// (doc_work_list_ordered); out and lse NaN-poisoned before every call. Checks:
//   (a) flags preset: bitwise the call without flags, for M = the default, M = SMs - 3 (3 CTAs) and M = SMs - 1 (one
//       CTA runs every unit: its mbarriers are set up again 1024 times), and for a list with split tasks (its fill
//       units run in the loop too: a split list always has fill work);
//   (b) the rows delivered by ordinary kernels after the list kernel has started: the gathered buffers NaN, the rows
//       in a wire buffer in another order; the list kernel (default M) launched first, then, 2 ms later (it must still
//       be running: its gathered units wait), on a second stream gather_rows into k2 and v2 and attn_ready_release,
//       which need SMs that waiting units would hold on a grid of one CTA per unit, their kernels loaded first
//       (kernels/attn_ready_delivery.h: lazy loading). It must complete without the
//       watchdog (10 s; attn_ready_fault_check passes) with (a)'s bits. (M = 0 is not run: there the waiting units may
//       hold every SM and only the watchdog would end the call.)
// Skips without a CUDA device (or without fwd v5: a device other than compute capability 9.0).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/attn_ready_delivery.h"
#include "kernels/attn_ready_flags.h"
#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#include "kernels/ops.h"
#include "parallel/schedule/doc_work_list.h"
#include "tests/gpu/attention_test_util.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/gpu/two_kv_work_list_inputs.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"
#include "tests/unit/test_reference.h"

namespace rt::test {
namespace {

#define RT_REQUIRE_FWD_V5_128()                                                                                 \
  do {                                                                                                          \
    RT_REQUIRE_CUDA();                                                                                          \
    if (!cuda::attn_fwd_ws_supported(0, 128)) GTEST_SKIP() << "fwd v5 needs compute capability 9.0 (sm_90a)"; \
  } while (0)

TwoKvCase many_units_case(uint64_t seed) {
  return make_two_kv_case(2, 32, 4, 128, 8192, 1024, 2048, 5000, 6024, seed, round_bf16);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

int sm_count() {
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

struct Got {
  std::vector<float> out, lse;  // (B, n, H, D), (B, H, n)
};

// The case on the device, one list, the flags' words, one call's outputs and the split scratch.
struct Fixture {
  TwoKvCase c;
  std::unique_ptr<DeviceCase> d;
  AttnWorkList list;
  Buffer words, ready, fault;          // (n_words) i32, (1) i32, (2) i32
  Buffer acc, m, l, out, lse;          // (B,H,n,D), (B,H,n) x 2 f32; (B,n,H,D) bf16; (B,H,n) f32
  Buffer split_state, split_count;     // (slots, H, 128, D + 2) f32, (slots, H, 8) i32 (at least 1 slot)

  Fixture(const TwoKvCase& c_, const DocWorkListSplit& split)
      : c(c_), d(to_device(c_)),
        list(doc_work_list_ordered(two_kv_work_list_inputs(c_), DocWorkListOrder::own_first, split)),
        words(gpu(), DType::i32, {int64_t(attn_work_list_words(list).size())}), ready(gpu(), DType::i32, {1}),
        fault(gpu(), DType::i32, {2}), acc(gpu(), DType::f32, {c.B, c.H, c.n, c.D}),
        m(gpu(), DType::f32, {c.B, c.H, c.n}), l(gpu(), DType::f32, {c.B, c.H, c.n}),
        out(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}), lse(gpu(), DType::f32, {c.B, c.H, c.n}),
        split_state(gpu(), DType::f32, {std::max<int64_t>(list.merge_slots, 1), c.H, kAttnWorkTileRows, c.D + 2}),
        split_count(gpu(), DType::i32, {std::max<int64_t>(list.merge_slots, 1), c.H, kAttnWorkRowGroups}) {
    upload_i32(words.t(), attn_work_list_words(list));
    upload_i32(fault.t(), {0, 0});
    poison(split_state.t());
    upload_i32(split_count.t(), std::vector<int32_t>(size_t(split_count.t().numel()), 0));
  }
  void set_ready_word(uint32_t value) const { upload_i32(ready.t(), {int32_t(value)}); }
  AttnReadyFlags flags(uint32_t epoch, int free_sms) const {
    AttnReadyFlags f;
    f.ready = ready.t(), f.fault = fault.t(), f.epoch = epoch, f.timeout_s = 10.0, f.free_sms = free_sms;
    return f;
  }
  int64_t gathered_tasks() const {
    int64_t n = 0;
    for (const AttnWorkTask& t : list.tasks) {
      bool g = false;
      for (int i = t.first_seg; i < t.first_seg + t.segs; ++i) g = g || list.segs[size_t(i)].source >= 0;
      n += g ? 1 : 0;
    }
    return n;
  }
  // Launches one call (asynchronously), out and lse poisoned first; flags off when `f` is null.
  void launch(const AttnReadyFlags* f) const {
    poison(out.t());
    poison(lse.t());
    AttnState st{acc.t(), m.t(), l.t()};
    attn_fwd_work_list(d->q.t(), d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), st, d->mask, words.t(),
                       int64_t(list.tasks.size()), out.t(), lse.t(),
                       AttnSplitScratch{split_state.t(), split_count.t(), list.merge_slots},
                       f ? *f : AttnReadyFlags{});
  }
  Got get() const { return Got{download(out.t()), download(lse.t())}; }
  Got run(const AttnReadyFlags* f) const {
    launch(f);
    return get();
  }
};

void check_preset(const DocWorkListSplit& split, const char* what) {
  Fixture fx(many_units_case(211), split);
  ASSERT_GT(fx.gathered_tasks(), 0) << "the case must read gathered rows";
  const int64_t units = fx.c.H * int64_t(fx.list.tasks.size());
  const int sms = sm_count();
  ASSERT_GT(units, 4 * sms) << "the case must hold many more units than SMs";
  const Got plain = fx.run(nullptr);
  for (float x : plain.out) ASSERT_FALSE(std::isnan(x)) << what << ": the call without flags left a NaN";
  fx.set_ready_word(9);
  for (int free_sms : {kAttnReadyFreeSmsDefault, sms - 3, sms - 1}) {
    const AttnReadyFlags f = fx.flags(9, free_sms);
    const Got got = fx.run(&f);
    EXPECT_TRUE(same_bits(got.out, plain.out)) << what << ", M = " << free_sms << ": out differs from no flags";
    EXPECT_TRUE(same_bits(got.lse, plain.lse)) << what << ", M = " << free_sms << ": lse differs from no flags";
    attn_ready_fault_check(f, "preset flags");
  }
}

TEST(AttnWorkListPersistentCuda, PresetFlagsBitwiseEqualNoFlagsAnyFreeSms) {
  RT_REQUIRE_FWD_V5_128();
  check_preset(DocWorkListSplit{}, "unsplit list");
}

TEST(AttnWorkListPersistentCuda, PresetFlagsBitwiseEqualNoFlagsSplitList) {
  RT_REQUIRE_FWD_V5_128();
  check_preset(forced_split(3, 1 << 12), "split list");
}

// A non-blocking stream for the delivery (it must not order with the framework's stream).
struct SideStream {
  cudaStream_t s = nullptr;
  SideStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~SideStream() { cudaStreamDestroy(s); }
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point from) { return std::chrono::duration<double>(Clock::now() - from).count(); }

// Polls `event` (cudaEventQuery never blocks) every 100 us for up to limit_s; the seconds from `from` at which it was
// seen complete, or -1 if it was not within the limit.
double seconds_until(cudaEvent_t event, Clock::time_point from, double limit_s) {
  const Clock::time_point poll_start = Clock::now();
  for (;;) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return seconds_since(from);
    if (e != cudaErrorNotReady) CUDA_CHECK(e);
    if (seconds_since(poll_start) > limit_s) return -1.0;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// The driver's module loading mode ("LAZY", "EAGER" or why it is unknown), through the runtime's entry point query
// (the test links no libcuda).
std::string module_loading_mode() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    return "unknown (no cuModuleGetLoadingMode)";
  }
  int mode = 0;  // CUmoduleLoadingMode: 1 eager, 2 lazy
  if (reinterpret_cast<int (*)(int*)>(fn)(&mode) != 0) return "unknown (cuModuleGetLoadingMode failed)";
  return mode == 2 ? "LAZY" : mode == 1 ? "EAGER" : "mode " + std::to_string(mode);
}

// RT_TEST_READY_COLD=1: the negative control of the fix (run it in a process of its own: loading is once per process).
bool cold_delivery_kernels() {
  const char* env = std::getenv("RT_TEST_READY_COLD");
  return env != nullptr && std::string(env) == "1";
}

// Delivery by kernels on a side stream while the persistent list kernel waits for the flag (issue 46). Failed on the
// H200 on 2026-12-04 (jobs 4 and 5: the flag never rose, the watchdog ended the call after 10 s) until the delivery
// kernels were loaded before the list kernel: under lazy module loading their first launch, while the list kernel
// spun, waited for that kernel to end (confirmed 2026-12-04 fourth session: loaded first it delivers at M = 8 and 66;
// RT_TEST_READY_COLD=1 blocks the gather_rows launch call ~10 s and fails; CUDA_MODULE_LOADING=EAGER delivers cold).
// RingAttention loads them the same way (attn_ready_load_delivery_kernels, kernels/attn_ready_delivery.h).
// It prints one VERDICT line that names where the delivery stopped:
//   * the host time of the delivery's launch calls (a load that waits for the list kernel blocks the launch call);
//   * an event after the unpack on the side stream (did gather_rows run while the list kernel ran?);
//   * the ready word read back by a copy-engine copy after the flag kernel (did the flag kernel run, and what did it
//     write?), and when the list kernel ended.
TEST(AttnWorkListPersistentCuda, RowsDeliveredByKernelsUnderTheListKernel) {
  RT_REQUIRE_FWD_V5_128();
  const bool cold = cold_delivery_kernels();
  const char* env_m = std::getenv("RT_ATTN_READY_FREE_SMS");
  const char* env_loading = std::getenv("CUDA_MODULE_LOADING");
  if (!cold) attn_ready_load_delivery_kernels(gpu());  // before any list kernel, as RingAttention's flagged set-up
  Fixture fx(many_units_case(223), DocWorkListSplit{});
  ASSERT_GT(fx.gathered_tasks() * fx.c.H, int64_t(sm_count())) << "the waiting units must be able to fill the SMs";
  const Got want = fx.run(nullptr);  // the rows in place, no flags
  const TwoKvCase& c = fx.c;
  // The wire: the gathered rows (B x R rows of Hkv x D) in a random order, and where each lands (gather_rows' index).
  const int64_t rows = c.B * c.R, W = c.Hkv * c.D;
  std::vector<int32_t> wire_of(static_cast<size_t>(rows));  // (rows) the wire row of gathered row i
  std::iota(wire_of.begin(), wire_of.end(), 0);
  std::shuffle(wire_of.begin(), wire_of.end(), std::mt19937_64(5));
  std::vector<float> wire_k(size_t(rows * W)), wire_v(size_t(rows * W));  // (rows, W) each
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t e = 0; e < W; ++e) {
      wire_k[size_t(wire_of[size_t(i)] * W + e)] = c.k2[size_t(i * W + e)];
      wire_v[size_t(wire_of[size_t(i)] * W + e)] = c.v2[size_t(i * W + e)];
    }
  Buffer wk(gpu(), DType::bf16, {rows, W}), wv(gpu(), DType::bf16, {rows, W}), index(gpu(), DType::i32, {rows});
  upload(wk.t(), wire_k);
  upload(wv.t(), wire_v);
  upload_i32(index.t(), wire_of);
  poison(fx.d->k2.t());
  poison(fx.d->v2.t());
  fx.set_ready_word(1);
  SideStream side;
  cudaEvent_t done, unpacked, released;  // the list kernel ended; the side stream's unpack ran; its read-back ran
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&unpacked, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&released, cudaEventDisableTiming));
  uint32_t* ready_seen = nullptr;  // (1) pinned: ready[0] as a copy after the flag kernel read it
  CUDA_CHECK(cudaMallocHost(&ready_seen, sizeof(uint32_t)));
  *ready_seen = 0xffffffffu;
  CUDA_CHECK(cudaDeviceSynchronize());  // the uploads and poison before the side stream reads or writes them

  const AttnReadyFlags f = fx.flags(2, kAttnReadyFreeSmsDefault);
  const int m_used = attn_ready_free_sms(f);  // what the op launches with (the variable overrides the explicit 8)
  fx.launch(&f);
  CUDA_CHECK(cudaEventRecord(done, cuda::current_stream()));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const cudaError_t state = cudaEventQuery(done);
  EXPECT_EQ(state, cudaErrorNotReady) << "the list kernel finished before its gathered rows were delivered ("
                                      << cudaGetErrorString(state) << "): it did not wait for the flag";
  const Clock::time_point t0 = Clock::now();
  const cudaStream_t main_stream = cuda::current_stream();
  cuda::set_current_stream(side.s);  // the unpack and the flag on the side stream, after the list kernel's launch
  gather_rows(fx.d->k2.t().view({rows, W}), wk.t(), index.t());
  gather_rows(fx.d->v2.t().view({rows, W}), wv.t(), index.t());
  const double gather_launch_s = seconds_since(t0);
  CUDA_CHECK(cudaEventRecord(unpacked, side.s));
  const Clock::time_point t1 = Clock::now();
  attn_ready_release(f, 0);
  const double release_launch_s = seconds_since(t1);
  CUDA_CHECK(cudaMemcpyAsync(ready_seen, fx.ready.t().data, sizeof(uint32_t), cudaMemcpyDeviceToHost, side.s));
  CUDA_CHECK(cudaEventRecord(released, side.s));
  cuda::set_current_stream(main_stream);
  const double unpacked_s = seconds_until(unpacked, t0, 3.0);
  const double released_s = seconds_until(released, t0, 3.0);
  const double done_s = seconds_until(done, t0, 20.0);  // the watchdog is 10 s
  CUDA_CHECK(cudaEventSynchronize(done));
  const double seconds = seconds_since(t0);
  CUDA_CHECK(cudaStreamSynchronize(side.s));
  const uint32_t word = *ready_seen;
  std::printf("delivered by kernels under the persistent list kernel: M = %d used of %d SMs "
              "(RT_ATTN_READY_FREE_SMS=%s, the call asked %d), module loading %s (CUDA_MODULE_LOADING=%s), "
              "delivery kernels %s\n",
              m_used, sm_count(), env_m ? env_m : "unset", kAttnReadyFreeSmsDefault, module_loading_mode().c_str(),
              env_loading ? env_loading : "unset",
              cold ? "NOT loaded first (RT_TEST_READY_COLD=1)" : "loaded first (attn_ready_load_delivery_kernels)");
  std::printf("  host time of the launch calls: gather_rows x2 %.3f ms, attn_ready_release %.3f ms\n",
              gather_launch_s * 1e3, release_launch_s * 1e3);
  std::printf("  from the delivery's launch: unpack done %s, flag kernel + read-back done %s (ready[0] = %u, epoch "
              "2), list kernel done %s\n",
              unpacked_s < 0 ? "NOT within 3 s" : (std::to_string(unpacked_s * 1e3) + " ms").c_str(),
              released_s < 0 ? "NOT within 3 s" : (std::to_string(released_s * 1e3) + " ms").c_str(), word,
              done_s < 0 ? "NOT within 20 s" : (std::to_string(done_s * 1e3) + " ms").c_str());
  const bool launch_blocked = gather_launch_s > 1.0 || release_launch_s > 1.0;
  const bool list_late = done_s < 0 || done_s > 5.0;
  const char* verdict =
      launch_blocked ? "a delivery launch call blocked on the host until the list kernel ended: a first launch's "
                       "module load waited for the running kernel (lazy loading)"
      : unpacked_s < 0 || (list_late && unpacked_s > 1.0)
          ? "gather_rows was launched at once but did not run while the list kernel ran: no SM for it, the side "
            "stream ordered behind the list kernel, or a module load queued behind it (if RT_TEST_READY_COLD=1 fails "
            "and the default passes, it is the load)"
      : released_s < 0 || (list_late && released_s > 1.0)
          ? "the unpack ran but the flag kernel (or the copy after it) did not while the list kernel ran"
      : list_late && word == 2u
          ? "the flag word held the epoch (copy read-back) while the list kernel still waited: its units do not see "
            "ready[0] (the wait loop or its read in the persistent form)"
      : list_late ? "the flag kernel ran but the word read back is not the epoch: the release wrote elsewhere"
                  : "delivered: the list kernel ended after the flag";
  std::printf("  VERDICT: %s\n", verdict);
  CUDA_CHECK(cudaFreeHost(ready_seen));
  CUDA_CHECK(cudaEventDestroy(released));
  CUDA_CHECK(cudaEventDestroy(unpacked));
  CUDA_CHECK(cudaEventDestroy(done));
  attn_ready_fault_check(f, "rows delivered by kernels");  // raises if the watchdog ended the call
  EXPECT_LT(seconds, 5.0) << "the list kernel ended long after the delivery: did the watchdog end it? (" << verdict
                          << ")";
  const Got got = fx.get();
  EXPECT_TRUE(same_bits(got.out, want.out)) << "out after the kernels' delivery differs from the rows-in-place call";
  EXPECT_TRUE(same_bits(got.lse, want.lse)) << "lse after the kernels' delivery differs from the rows-in-place call";
}

}  // namespace
}  // namespace rt::test
