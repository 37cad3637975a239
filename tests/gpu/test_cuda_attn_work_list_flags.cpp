// attn_fwd_work_list on CUDA with ready flags (kernels/attn_ready_flags.h; the kernel side in
// kernels/cuda/attention/attn_fwd_work_list_ready.cuh): a unit waits for ready[s] == epoch before its first gathered
// tile, under a watchdog. One GPU, the gathered rows delivered by a harness kernel on a stream of the test's
// (tests/gpu/ready_flag_delivery.h) while the list kernel runs. Cases from tests/unit/kernels/two_kv_case.h (B = 2,
// GQA, random documents, own rows [300, 700) and [1200, 1500) of 2100), lists from doc_work_list over the device's
// positions; out and lse NaN-poisoned before every call. Checks:
//   (a) flags preset (ready == epoch before the launch): bitwise equal to the call without flags, D = 128 and 64;
//   (b) delayed delivery: the gathered buffers NaN until the harness, started before the list kernel, copies the rows
//       and raises the flag 200 us after the host's go, which comes 2 ms after the list kernel's launch; the list
//       kernel must still be running at the go (it waits) and its result is bitwise (a)'s;
//   (c) stale flag (ready == epoch - 1 over other finite rows, the new rows and flag delivered late): the new rows'
//       result, bitwise (a)'s (and the stale rows' result differs, so the check can fail);
//   (d) withheld (the flag never raised, timeout 50 ms): attn_ready_fault_check raises naming the caller, source 0,
//       the epoch and the timeout, within 5 s of the launch (one timeout, not one per unit); the rows of every task
//       that reads a gathered tile are NaN for every head, the other tasks' rows are (a)'s; the fault word is cleared;
//       then a call with the flag raised gives (a)'s bits (the context is usable). With RT_ATTN_WORK_LIST_CHECK=1 the
//       op itself raises.
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
#include <string>
#include <thread>
#include <vector>

#include "kernels/attn_ready_flags.h"
#include "kernels/attn_work_list.h"
#include "kernels/cuda/attention/attn_fwd_sm90ws.cuh"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#include "parallel/schedule/doc_work_list.h"
#include "tests/gpu/attention_test_util.h"
#include "tests/gpu/ready_flag_delivery.h"
#include "tests/gpu/two_kv_device_case.h"
#include "tests/gpu/two_kv_work_list_inputs.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/test_reference.h"

namespace rt::test {
namespace {

#define RT_REQUIRE_FWD_V5(D)                                                                                  \
  do {                                                                                                        \
    RT_REQUIRE_CUDA();                                                                                        \
    if (!cuda::attn_fwd_ws_supported(0, D)) GTEST_SKIP() << "fwd v5 needs compute capability 9.0 (sm_90a)"; \
  } while (0)

std::vector<int32_t> download_i32(const Tensor& src) {
  std::vector<int32_t> out(static_cast<size_t>(src.numel()));
  copy_cast(Tensor(out.data(), DType::i32, Device::cpu(), {src.numel()}), src);
  return out;
}

struct Got {
  std::vector<float> out, lse;  // (B, n, H, D), (B, H, n)
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// A call's fixed parts: the case on the device, its list, the flags' words.
struct Fixture {
  TwoKvCase c;
  std::unique_ptr<DeviceCase> d;
  AttnWorkList list;
  Buffer words, ready, fault;  // (n_words) i32, (1) i32, (2) i32
  int64_t gathered_tasks = 0;  // tasks with a segment of source 0

  explicit Fixture(const TwoKvCase& c_)
      : c(c_), d(to_device(c_)), list(doc_work_list(two_kv_work_list_inputs(c_))),
        words(gpu(), DType::i32, {int64_t(attn_work_list_words(list).size())}), ready(gpu(), DType::i32, {1}),
        fault(gpu(), DType::i32, {2}) {
    upload_i32(words.t(), attn_work_list_words(list));
    upload_i32(fault.t(), {0, 0});
    for (const AttnWorkTask& t : list.tasks) {
      bool g = false;
      for (int i = t.first_seg; i < t.first_seg + t.segs; ++i) g = g || list.segs[size_t(i)].source >= 0;
      gathered_tasks += g ? 1 : 0;
    }
  }
  void set_ready(uint32_t value) { upload_i32(ready.t(), {int32_t(value)}); }
  AttnReadyFlags flags(uint32_t epoch, double timeout_s = 10.0) const {
    AttnReadyFlags f;
    f.ready = ready.t(), f.fault = fault.t(), f.epoch = epoch, f.timeout_s = timeout_s;
    return f;
  }
  // One call's outputs and scratch, allocated before anything runs on the side stream (an allocation may wait for
  // the device); out and lse are read by get().
  struct Call {
    Buffer acc, m, l, out, lse;  // (B,H,n,D), (B,H,n) x 2 f32; (B,n,H,D) bf16; (B,H,n) f32
    Got get() const { return Got{download(out.t()), download(lse.t())}; }
  };
  std::unique_ptr<Call> outputs() const {
    return std::unique_ptr<Call>(new Call{
        Buffer(gpu(), DType::f32, {c.B, c.H, c.n, c.D}), Buffer(gpu(), DType::f32, {c.B, c.H, c.n}),
        Buffer(gpu(), DType::f32, {c.B, c.H, c.n}), Buffer(gpu(), DType::bf16, {c.B, c.n, c.H, c.D}),
        Buffer(gpu(), DType::f32, {c.B, c.H, c.n})});
  }
  // Launches one call into `o` (asynchronously), out and lse poisoned first; flags off when `f` is null.
  void launch(const Call& o, const AttnReadyFlags* f) const {
    poison(o.out.t());
    poison(o.lse.t());
    AttnState st{o.acc.t(), o.m.t(), o.l.t()};
    attn_fwd_work_list(d->q.t(), d->k1.t(), d->v1.t(), d->k2.t(), d->v2.t(), st, d->mask, words.t(),
                       int64_t(list.tasks.size()), o.out.t(), o.lse.t(), AttnSplitScratch{},
                       f ? *f : AttnReadyFlags{});
  }
  Got run(const AttnReadyFlags* f) const {
    const auto o = outputs();
    launch(*o, f);
    return o->get();
  }
};

TwoKvCase random_docs(int64_t D, uint64_t seed) {
  return make_two_kv_case(2, 4, 2, D, 2100, 300, 700, 1200, 1500, seed, round_bf16);
}

// A non-blocking stream for the harness (it must not order with the framework's legacy default stream).
struct SideStream {
  cudaStream_t s = nullptr;
  SideStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~SideStream() { cudaStreamDestroy(s); }
};

// The rows (B, n) of the tasks that read a gathered tile.
std::vector<char> gathered_rows(const Fixture& fx) {
  std::vector<char> rows(size_t(fx.c.B * fx.c.n), 0);
  for (const AttnWorkTask& t : fx.list.tasks) {
    bool g = false;
    for (int i = t.first_seg; i < t.first_seg + t.segs; ++i) g = g || fx.list.segs[size_t(i)].source >= 0;
    if (!g) continue;
    for (int64_t r = t.q_row; r < std::min<int64_t>(fx.c.n, t.q_row + kAttnWorkTileRows); ++r)
      rows[size_t(t.sample * fx.c.n + r)] = 1;
  }
  return rows;
}

void check_preset(int64_t D, uint64_t seed) {
  Fixture fx(random_docs(D, seed));
  ASSERT_GT(fx.gathered_tasks, 0) << "the case must read gathered rows";
  const Got plain = fx.run(nullptr);
  fx.set_ready(5);
  const AttnReadyFlags f = fx.flags(5);
  const Got flagged = fx.run(&f);
  for (float x : plain.out) ASSERT_FALSE(std::isnan(x)) << "the call without flags left a NaN";
  EXPECT_TRUE(same_bits(flagged.out, plain.out)) << "out with preset flags differs from the call without flags";
  EXPECT_TRUE(same_bits(flagged.lse, plain.lse)) << "lse with preset flags differs from the call without flags";
  attn_ready_fault_check(f, "preset flags");  // no fault
}

TEST(AttnWorkListFlagsCuda, PresetFlagsBitwiseEqualNoFlagsD128) {
  RT_REQUIRE_FWD_V5(128);
  check_preset(128, 101);
}

TEST(AttnWorkListFlagsCuda, PresetFlagsBitwiseEqualNoFlagsD64) {
  RT_REQUIRE_FWD_V5(64);
  check_preset(64, 103);
}

// The gathered buffers hold `before` (as bf16 values) until the harness delivers the case's rows late; the list
// kernel runs with epoch 2 (ready starts at 1). Returns the result; expects the kernel to wait for the go.
Got run_delayed(Fixture& fx, const std::vector<float>* before_k2, const std::vector<float>* before_v2) {
  const TwoKvCase& c = fx.c;
  Buffer k2_new(gpu(), DType::bf16, {c.B, c.R, c.Hkv, c.D}), v2_new(gpu(), DType::bf16, {c.B, c.R, c.Hkv, c.D});
  upload(k2_new.t(), c.k2);
  upload(v2_new.t(), c.v2);
  if (before_k2) {
    upload(fx.d->k2.t(), *before_k2);
    upload(fx.d->v2.t(), *before_v2);
  } else {
    poison(fx.d->k2.t());
    poison(fx.d->v2.t());
  }
  fx.set_ready(1);
  const auto call = fx.outputs();
  SideStream side;
  DeliverySignals signals;
  cudaEvent_t done;
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CUDA_CHECK(cudaDeviceSynchronize());  // the uploads before the harness's stream reads them
  DelayedDelivery dd;
  dd.src[0] = k2_new.t().data, dd.src[1] = v2_new.t().data;
  dd.dst[0] = fx.d->k2.t().data, dd.dst[1] = fx.d->v2.t().data;
  dd.bytes[0] = dd.bytes[1] = size_t(fx.d->k2.t().nbytes());
  dd.ready = static_cast<unsigned*>(fx.ready.t().data);
  dd.epoch = 2;
  dd.delay_ns = 200000;  // 200 us after the go
  EXPECT_TRUE(signals.launch(dd, side.s)) << "the harness did not start within 5 s";
  const AttnReadyFlags f = fx.flags(2);
  fx.launch(*call, &f);
  CUDA_CHECK(cudaEventRecord(done, cuda::current_stream()));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const cudaError_t state = cudaEventQuery(done);
  EXPECT_EQ(state, cudaErrorNotReady) << "the list kernel finished before its gathered rows were delivered ("
                                      << cudaGetErrorString(state) << "): it did not wait for the flag";
  signals.go();
  CUDA_CHECK(cudaStreamSynchronize(side.s));
  const Got got = call->get();
  CUDA_CHECK(cudaEventDestroy(done));
  attn_ready_fault_check(f, "delayed delivery");
  return got;
}

TEST(AttnWorkListFlagsCuda, DelayedDeliveryBitwiseEqualPreset) {
  RT_REQUIRE_FWD_V5(128);
  Fixture fx(random_docs(128, 107));
  ASSERT_GT(fx.gathered_tasks, 0);
  const Got want = fx.run(nullptr);  // the rows in place, no flags: (a)'s bits
  const Got got = run_delayed(fx, nullptr, nullptr);
  EXPECT_TRUE(same_bits(got.out, want.out)) << "out after a delayed delivery differs from the rows-in-place call";
  EXPECT_TRUE(same_bits(got.lse, want.lse)) << "lse after a delayed delivery differs from the rows-in-place call";
}

TEST(AttnWorkListFlagsCuda, StaleFlagWaitsForTheNewRows) {
  RT_REQUIRE_FWD_V5(128);
  Fixture fx(random_docs(128, 109));
  ASSERT_GT(fx.gathered_tasks, 0);
  const Got want = fx.run(nullptr);
  // Stale rows: the new rows in reverse order (finite, the same count, other values at every position), under the flag
  // of the previous epoch.
  std::vector<float> stale_k2 = fx.c.k2, stale_v2 = fx.c.v2;
  std::reverse(stale_k2.begin(), stale_k2.end());
  std::reverse(stale_v2.begin(), stale_v2.end());
  upload(fx.d->k2.t(), stale_k2);
  upload(fx.d->v2.t(), stale_v2);
  const Got on_stale = fx.run(nullptr);
  EXPECT_FALSE(same_bits(on_stale.out, want.out)) << "the stale rows give the new rows' result: the test cannot fail";
  const Got got = run_delayed(fx, &stale_k2, &stale_v2);
  EXPECT_TRUE(same_bits(got.out, want.out)) << "out over a stale flag differs from the new rows' result";
  EXPECT_TRUE(same_bits(got.lse, want.lse)) << "lse over a stale flag differs from the new rows' result";
}

TEST(AttnWorkListFlagsCuda, WithheldFlagRaisesNamingTheSourceAndNeverHangs) {
  RT_REQUIRE_FWD_V5(128);
  Fixture fx(random_docs(128, 113));
  ASSERT_GT(fx.gathered_tasks, 0);
  const Got want = fx.run(nullptr);
  const std::vector<char> rows = gathered_rows(fx);
  fx.set_ready(6);  // the previous epoch's; the call waits for 7, which never comes
  const AttnReadyFlags f = fx.flags(7, 0.05);
  const auto call = fx.outputs();
  const auto t0 = std::chrono::steady_clock::now();
  fx.launch(*call, &f);
  std::string message;
  try {
    attn_ready_fault_check(f, "rank 3, layer 11");
    ADD_FAILURE() << "a withheld flag raised no error";
  } catch (const Error& e) {
    message = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("withheld flag: the error after %.3f s: %s\n", seconds, message.c_str());
  EXPECT_NE(message.find("rank 3, layer 11: gathered K/V from source 0 (epoch 7) never arrived within 0.05 s"),
            std::string::npos)
      << message;
  EXPECT_GE(seconds, 0.045) << "the watchdog fired before its timeout";
  EXPECT_LT(seconds, 5.0) << "the watchdog took far longer than its 50 ms";
  EXPECT_EQ(download_i32(fx.fault.t()), (std::vector<int32_t>{0, 0})) << "the check did not clear the fault word";
  const Got got = call->get();
  const int64_t HD = fx.c.H * fx.c.D;
  int64_t nan_expected_ok = 0, nan_rows_bad = 0, other_rows_bad = 0, other_rows = 0;
  for (int64_t row = 0; row < fx.c.B * fx.c.n; ++row) {
    const bool gathered = rows[size_t(row)] != 0;
    other_rows += gathered ? 0 : 1;
    for (int64_t e = row * HD; e < (row + 1) * HD; ++e) {
      if (gathered) {
        std::isnan(got.out[size_t(e)]) ? ++nan_expected_ok : ++nan_rows_bad;
      } else if (std::memcmp(&got.out[size_t(e)], &want.out[size_t(e)], 4) != 0) {
        ++other_rows_bad;
      }
    }
  }
  EXPECT_GT(nan_expected_ok, 0);
  EXPECT_EQ(nan_rows_bad, 0) << "rows of tasks that waited in vain hold numbers, not NaN";
  EXPECT_EQ(other_rows_bad, 0) << "rows of tasks without gathered tiles differ from the call without flags";
  std::printf("withheld flag: %lld of %lld rows NaN (tasks with gathered tiles), %lld rows as without flags\n",
              (long long)(fx.c.B * fx.c.n - other_rows), (long long)(fx.c.B * fx.c.n), (long long)other_rows);

  // The context is usable: the next call, its flag raised, gives the rows-in-place bits.
  fx.set_ready(8);
  const AttnReadyFlags next = fx.flags(8);
  const Got again = fx.run(&next);
  EXPECT_TRUE(same_bits(again.out, want.out)) << "the call after a timed-out one differs";
  EXPECT_TRUE(same_bits(again.lse, want.lse));
  attn_ready_fault_check(next, "the call after");

  // RT_ATTN_WORK_LIST_CHECK=1: the op waits after its launch and raises itself.
  const AttnReadyFlags f9 = fx.flags(9, 0.05);
  ::setenv("RT_ATTN_WORK_LIST_CHECK", "1", 1);
  try {
    fx.run(&f9);
    ADD_FAILURE() << "the op with RT_ATTN_WORK_LIST_CHECK=1 raised no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn_fwd_work_list: gathered K/V from source 0 (epoch 9)"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("RT_ATTN_WORK_LIST_CHECK");
  EXPECT_EQ(download_i32(fx.fault.t()), (std::vector<int32_t>{0, 0}));
}

}  // namespace
}  // namespace rt::test
