// attn_ready_release on host words (kernels/attn_ready_flags.h: the store of the call's epoch into one ready word,
// which the gather path issues after the rows' unpack) and the free_sms check of the flags (M SMs left free by the CUDA
// kernel's persistent form; >= 0). The CUDA release is exercised by tests/gpu/test_cuda_attn_work_list_persistent.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/attn_ready_delivery.h"
#include "kernels/attn_ready_flags.h"
#include "tests/unit/test_reference.h"

namespace rt {
namespace {

struct Words {
  test::HostTensor ready = test::i32({3}), fault = test::i32({2});  // (3) i32 ready words, (2) i32 fault word
  Words() {
    std::memset(ready.t.data, 0x5a, 12);
    std::memset(fault.t.data, 0, 8);
  }
  AttnReadyFlags flags(uint32_t epoch) const {
    AttnReadyFlags f;
    f.ready = ready.t, f.fault = fault.t, f.epoch = epoch, f.timeout_s = 1.0;
    return f;
  }
  uint32_t word(int s) const { return static_cast<const uint32_t*>(ready.t.data)[s]; }
};

TEST(AttnReadyRelease, StoresTheEpochIntoOneWord) {
  Words w;
  const uint32_t before = w.word(0);
  attn_ready_release(w.flags(0xfffffff3u), 1);
  EXPECT_EQ(w.word(1), 0xfffffff3u);
  EXPECT_EQ(w.word(0), before) << "another source's word changed";
  EXPECT_EQ(w.word(2), before) << "another source's word changed";
  attn_ready_release(w.flags(7), 1);  // the next call's epoch replaces it
  EXPECT_EQ(w.word(1), 7u);
}

TEST(AttnReadyRelease, RefusesFlagsOffAndSourcesOutsideTheWords) {
  Words w;
  auto refused = [&](const AttnReadyFlags& f, int source, const char* says) {
    try {
      attn_ready_release(f, source);
      ADD_FAILURE() << "accepted source " << source;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(AttnReadyFlags{}, 0, "off");
  refused(w.flags(1), 3, "source 3");
  refused(w.flags(1), -1, "source -1");
}

// The delivery kernels' loading (kernels/attn_ready_delivery.h) has nothing to load for host words: it returns, again
// and again, and leaves the host release working. The CUDA loading is exercised by the GPU test named above.
TEST(AttnReadyRelease, LoadingTheDeliveryKernelsOnTheHostDoesNothing) {
  Words w;
  attn_ready_load_delivery_kernels(Device::cpu());
  attn_ready_load_delivery_kernels(Device::cpu());
  attn_ready_release(w.flags(11), 0);
  EXPECT_EQ(w.word(0), 11u);
}

TEST(AttnReadyRelease, FreeSmsDefaultAndCheck) {
  Words w;
  EXPECT_EQ(w.flags(1).free_sms, kAttnReadyFreeSmsDefault);
  EXPECT_GT(kAttnReadyFreeSmsDefault, 0) << "flags on must leave SMs free by default";
  AttnReadyFlags f = w.flags(1);
  f.free_sms = 0;  // one CTA per unit: allowed
  check_attn_ready_flags(f, Device::cpu(), "op");
  f.free_sms = -1;
  try {
    check_attn_ready_flags(f, Device::cpu(), "op");
    ADD_FAILURE() << "accepted free_sms = -1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("free_sms = -1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rt
