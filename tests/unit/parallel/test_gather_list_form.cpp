// The gather scheme's one-launch forms (parallel/cp/gather_list_form.h), the rule RingAttention and
// bench_doc_ring_steps share: the forward runs attn_fwd_work_list exactly where the knob is on and the list op runs the
// call; the backward attn_bwd_work_list exactly where, in addition, the backward is not FP8. The list ops' questions
// are asked for the call's key list (own rows, the gap to the next 128-row tile, the gathered rows), and on the CPU the
// list ops run every call, so the knob (RT_ATTN_WORK_LIST: unset or 1 on, 0 off) alone decides there. The bench's side
// (its --plan-only forms line with the knob unset and 0) is checked by bench/doc_attention_side_by_side.py --self-test
// --ours (ctest bench_doc_ring_steps_plan); RingAttention's by tests/mpi/test_ring_gather_work_list.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/attention.h"
#include "parallel/cp/gather_list_form.h"
#include "parallel/cp/gather_scheme.h"

namespace rt {
namespace {

// RT_ATTN_WORK_LIST set (or unset: nullptr) for the scope, the earlier value put back after.
class WorkListEnv {
 public:
  explicit WorkListEnv(const char* value) {
    const char* before = std::getenv(kName);
    if (before) saved_ = before, had_ = true;
    if (value) ::setenv(kName, value, 1);
    else ::unsetenv(kName);
  }
  ~WorkListEnv() {
    if (had_) ::setenv(kName, saved_.c_str(), 1);
    else ::unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "RT_ATTN_WORK_LIST";
  std::string saved_;
  bool had_ = false;
};

TEST(GatherListForm, ForwardListExactlyWhereTheKnobIsOnAndTheOpRuns) {
  for (int on = 0; on < 2; ++on)
    for (int runs = 0; runs < 2; ++runs)
      EXPECT_EQ(gather_fwd_list_form(on, runs), on && runs) << "knob " << on << ", list op runs " << runs;
}

TEST(GatherListForm, BackwardListAlsoNotWithTheFp8Backward) {
  int lists = 0;
  for (int on = 0; on < 2; ++on)
    for (int fp8 = 0; fp8 < 2; ++fp8)
      for (int runs = 0; runs < 2; ++runs) {
        const bool list = gather_bwd_list_form(on, fp8, runs);
        lists += list;
        EXPECT_EQ(list, on && !fp8 && runs) << "knob " << on << ", fp8 " << fp8 << ", list op runs " << runs;
      }
  EXPECT_EQ(lists, 1) << "one combination of the eight runs the list";
}

TEST(GatherListForm, KeyListRowsAreOwnRowsToTheTileThenTheGatheredRows) {
  EXPECT_EQ(gather_one_launch_key_rows(256, 0), 256);
  EXPECT_EQ(gather_one_launch_key_rows(256, 17), 273);
  EXPECT_EQ(gather_one_launch_key_rows(300, 5), 389);  // 300 own rows padded to 384
  EXPECT_EQ(gather_one_launch_key_rows(1, 128), 256);
  for (int64_t n : {64, 127, 128, 129, 8192, 16384 + 3})
    EXPECT_EQ(gather_one_launch_key_rows(n, 1000), attn_second_kv_row(n) + 1000) << n;
}

TEST(GatherListForm, OnTheCpuTheListOpsRunEveryCall) {
  const Device cpu = Device::cpu();
  for (DType act : {DType::f32, DType::bf16})
    for (int64_t n : {1, 100, 1200}) {
      EXPECT_TRUE(gather_fwd_list_runs(cpu, act, 2, 4, 8, n, 300)) << n;
      EXPECT_TRUE(gather_bwd_list_runs(cpu, act, 2, 4, 2, 8, n, 300)) << n;
      EXPECT_TRUE(gather_bwd_list_runs(cpu, act, 1, 32, 8, 128, n, 0)) << n;
    }
}

// On CPU ranks the knob decides both forms: unset (the default) and 1 the lists, 0 the two_kv calls; the FP8 backward
// keeps the two_kv call whatever the knob.
TEST(GatherListForm, TheKnobDecidesOnTheCpu) {
  const Device cpu = Device::cpu();
  struct Case {
    const char* env;
    bool list;
  };
  for (const Case c : {Case{nullptr, true}, Case{"1", true}, Case{"0", false}}) {
    const WorkListEnv env(c.env);
    const bool on = gather_work_list_from_env();
    const std::string what = std::string("RT_ATTN_WORK_LIST=") + (c.env ? c.env : "(unset)");
    EXPECT_EQ(gather_fwd_list_form(on, gather_fwd_list_runs(cpu, DType::f32, 1, 4, 8, 600, 256)), c.list) << what;
    EXPECT_EQ(gather_bwd_list_form(on, false, gather_bwd_list_runs(cpu, DType::f32, 1, 4, 2, 8, 600, 256)), c.list)
        << what;
    EXPECT_FALSE(gather_bwd_list_form(on, true, gather_bwd_list_runs(cpu, DType::f32, 1, 4, 2, 8, 600, 256))) << what;
  }
}

}  // namespace
}  // namespace rt
