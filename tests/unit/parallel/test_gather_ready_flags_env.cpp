// RT_ATTN_READY_FLAGS (parallel/cp/gather_scheme.h gather_ready_flags_from_env): 1 turns the gather forward's ready
// flags on (CUDA ranks; experimental), unset or 0 off; any other value is refused, naming both values. And make_ring_gather on a CPU
// arena allocates no flag words (CPU ranks never use them: cp_.wait orders the rows before the call).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/arena.h"
#include "parallel/cp/gather_scheme.h"

namespace rt {
namespace {

// Sets RT_ATTN_READY_FLAGS for its scope (nullptr: unset), restoring the value before.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* value) {
    const char* old = std::getenv("RT_ATTN_READY_FLAGS");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) ::setenv("RT_ATTN_READY_FLAGS", value, 1);
    else ::unsetenv("RT_ATTN_READY_FLAGS");
  }
  ~ScopedEnv() {
    if (had_) ::setenv("RT_ATTN_READY_FLAGS", old_.c_str(), 1);
    else ::unsetenv("RT_ATTN_READY_FLAGS");
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST(GatherReadyFlagsEnv, OneOnUnsetOrZeroOffOthersRefused) {
  {
    ScopedEnv e(nullptr);
    EXPECT_FALSE(gather_ready_flags_from_env());
  }
  {
    ScopedEnv e("1");
    EXPECT_TRUE(gather_ready_flags_from_env());
  }
  {
    ScopedEnv e("0");
    EXPECT_FALSE(gather_ready_flags_from_env());
  }
  for (const char* bad : {"2", "on", "", "01"}) {
    ScopedEnv e(bad);
    try {
      gather_ready_flags_from_env();
      ADD_FAILURE() << "accepted RT_ATTN_READY_FLAGS='" << bad << "'";
    } catch (const Error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find(std::string("RT_ATTN_READY_FLAGS=") + bad + " is not 1"), std::string::npos) << m;
      EXPECT_NE(m.find("or 0"), std::string::npos) << m;
    }
  }
}

TEST(GatherReadyFlagsEnv, CpuRingsAllocateNoFlagWords) {
  ScopedEnv e("1");
  Arena arena(Device::cpu(), size_t(8) << 20);
  RingAttentionShape shape;
  shape.batch = 1, shape.local_tokens = 128, shape.heads = 2, shape.kv_heads = 1, shape.head_dim = 64;
  shape.dtype = DType::f32;
  const std::unique_ptr<RingGather> g = make_ring_gather(shape, 2, DType::f32, arena);
  EXPECT_TRUE(g->ready_flags_on);
  EXPECT_FALSE(g->ready.defined()) << "a CPU ring allocated ready words";
  EXPECT_FALSE(g->fault.defined()) << "a CPU ring allocated a fault word";
}

}  // namespace
}  // namespace rt
