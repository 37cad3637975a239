// The host side of the work-list forward's ready flags (kernels/attn_ready_flags.h): the fault word's encoding and
// decoding, the watchdog's limit, the error's text, the argument checks, attn_ready_fault_check on a host fault word
// (raises naming the source, epoch and caller, and clears the word), and the CPU op ignoring the flags (the same bits
// with flags that would never pass).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attn_ready_flags.h"
#include "kernels/attn_work_list.h"
#include "parallel/schedule/doc_work_list.h"
#include "tests/unit/kernels/two_kv_case.h"
#include "tests/unit/parallel/doc_work_list_cases.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {

TEST(AttnReadyFlags, FaultWordRoundTrips) {
  for (uint32_t epoch : {0u, 1u, 77u, 0xfffffffeu, 0xffffffffu})
    for (int source : {0, 1, 7, kAttnReadySourcesMax - 1}) {
      const uint64_t w = attn_ready_fault_word(epoch, source);
      EXPECT_NE(w, 0u) << "a fault must never read as none";
      const AttnReadyFault f = attn_ready_fault_decode(w);
      EXPECT_TRUE(f.set);
      EXPECT_EQ(f.epoch, epoch);
      EXPECT_EQ(f.source, source);
    }
  EXPECT_FALSE(attn_ready_fault_decode(0).set);
  // atomicMax keeps the latest epoch's fault whatever the sources.
  EXPECT_GT(attn_ready_fault_word(5, 0), attn_ready_fault_word(4, kAttnReadySourcesMax - 1));
}

TEST(AttnReadyFlags, TimeoutInNanoseconds) {
  EXPECT_EQ(attn_ready_timeout_ns(0.05, "op"), 50000000u);
  EXPECT_EQ(attn_ready_timeout_ns(600, "op"), 600000000000u);
  EXPECT_EQ(attn_ready_timeout_ns(1e-12, "op"), 1u);
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    try {
      attn_ready_timeout_ns(bad, "my_op");
      ADD_FAILURE() << "accepted timeout_s = " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("my_op"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("timeout_s"), std::string::npos) << e.what();
    }
  }
}

TEST(AttnReadyFlags, MessageNamesSourceEpochTimeoutAndCaller) {
  AttnReadyFault f;
  f.set = true, f.epoch = 12, f.source = 3;
  const std::string m = attn_ready_fault_message(f, 0.25, "rank 5, layer 7");
  EXPECT_EQ(m.rfind("rank 5, layer 7: gathered K/V from source 3 (epoch 12) never arrived within 0.25 s", 0), 0u)
      << m;
}

struct HostFlags {
  test::HostTensor ready = test::i32({2}), fault = test::i32({2});
  AttnReadyFlags flags() const {
    AttnReadyFlags f;
    f.ready = ready.t, f.fault = fault.t, f.epoch = 9, f.timeout_s = 1.0;
    return f;
  }
};

TEST(AttnReadyFlags, ChecksRefuseBadArguments) {
  HostFlags h;
  check_attn_ready_flags(h.flags(), Device::cpu(), "op");  // good
  check_attn_ready_flags(AttnReadyFlags{}, Device::cpu(), "op");  // off: nothing to check
  struct Bad {
    const char* what;
    AttnReadyFlags f;
    const char* says;
  };
  test::HostTensor too_many = test::i32({kAttnReadySourcesMax + 1}), f32_ready = test::f32({2}),
                   long_fault = test::i32({3});
  std::vector<Bad> bad;
  bad.push_back(Bad{"no fault word", h.flags(), "fault"});
  bad.back().f.fault = Tensor();
  bad.push_back(Bad{"a fault word of 3", h.flags(), "fault"});
  bad.back().f.fault = long_fault.t;
  bad.push_back(Bad{"33 sources", h.flags(), "ready"});
  bad.back().f.ready = too_many.t;
  bad.push_back(Bad{"f32 ready", h.flags(), "ready"});
  bad.back().f.ready = f32_ready.t;
  bad.push_back(Bad{"no timeout", h.flags(), "timeout_s"});
  bad.back().f.timeout_s = 0;
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    try {
      check_attn_ready_flags(b.f, Device::cpu(), "op");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos) << e.what();
    }
  }
  try {  // flags on another device than q's
    check_attn_ready_flags(h.flags(), Device::cuda(0), "op");
    ADD_FAILURE() << "accepted flags on the host for a CUDA call";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ready is on"), std::string::npos) << e.what();
  }
}

TEST(AttnReadyFlags, FaultCheckRaisesOnceAndClears) {
  HostFlags h;
  attn_ready_fault_check(h.flags(), "rank 0, layer 0");  // zero: no fault
  attn_ready_fault_check(AttnReadyFlags{}, "off");         // flags off: nothing to read
  const uint64_t w = attn_ready_fault_word(9, 0);
  std::memcpy(h.fault.t.data, &w, 8);
  try {
    attn_ready_fault_check(h.flags(), "rank 2, layer 4");
    ADD_FAILURE() << "a fault word was not raised";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 2, layer 4"), std::string::npos) << m;
    EXPECT_NE(m.find("from source 0 (epoch 9)"), std::string::npos) << m;
  }
  const int32_t* words = static_cast<const int32_t*>(h.fault.t.data);
  EXPECT_EQ(words[0], 0);
  EXPECT_EQ(words[1], 0);
  attn_ready_fault_check(h.flags(), "rank 2, layer 5");  // cleared: no second error
}

TEST(AttnReadyFlags, CpuOpIgnoresTheFlags) {
  // Flags that would never pass on a GPU (ready 0, epoch 9): the CPU op has its rows already and gives the bits of
  // the call without flags.
  const test::TwoKvCase c = test::make_two_kv_case(2, 4, 2, 32, 1400, 150, 380, 900, 1090, 73, test::bf16_round);
  const AttnWorkList list = doc_work_list(test::work_list_inputs_of(c));
  ASSERT_GT(list.tasks.size(), 0u);
  const test::HostTensor words = test::work_list_words_tensor(attn_work_list_words(list));
  const test::HostTensor q = test::host(c.q, {c.B, c.n, c.H, c.D}), k1 = test::host(c.k1, {c.B, c.n, c.Hkv, c.D}),
                         v1 = test::host(c.v1, {c.B, c.n, c.Hkv, c.D}), k2 = test::host(c.k2, {c.B, c.R, c.Hkv, c.D}),
                         v2 = test::host(c.v2, {c.B, c.R, c.Hkv, c.D});
  HostFlags h;
  auto run = [&](const AttnReadyFlags& flags, test::HostTensor& out, test::HostTensor& lse) {
    test::HostTensor acc = test::f32({c.B, c.H, c.n, c.D}), m = test::f32({c.B, c.H, c.n}),
                     l = test::f32({c.B, c.H, c.n});  // (B,H,n,D), (B,H,n) x 2
    AttnState scratch{acc.t, m.t, l.t};
    test::poison(out);
    test::poison(lse);
    attn_fwd_work_list(q.t, k1.t, v1.t, k2.t, v2.t, scratch, c.mask(), words.t, int64_t(list.tasks.size()), out.t,
                       lse.t, AttnSplitScratch{}, flags);
  };
  test::HostTensor out0 = test::f32({c.B, c.n, c.H, c.D}), lse0 = test::f32({c.B, c.H, c.n});  // (B,n,H,D), (B,H,n)
  test::HostTensor out1 = test::f32({c.B, c.n, c.H, c.D}), lse1 = test::f32({c.B, c.H, c.n});
  run(AttnReadyFlags{}, out0, lse0);
  run(h.flags(), out1, lse1);
  EXPECT_FALSE(test::any_nan(out1));
  EXPECT_EQ(std::memcmp(out0.f(), out1.f(), size_t(out0.numel()) * 4), 0);
  EXPECT_EQ(std::memcmp(lse0.f(), lse1.f(), size_t(lse0.numel()) * 4), 0);
}

}  // namespace
}  // namespace rt
