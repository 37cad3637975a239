// AttnDocPlans (kernels/attn_doc_plans.h), host side: the keying of the per-batch document set-up cache. A call
// finds the plan of its own key only (every field of the key tells plans apart), new_batch() drops every plan (so
// new document lengths in the same buffers never meet an old plan), a call on another stream or device or one that
// does not fit bypasses the cache, plans are laid out 256-byte aligned in the workspace, and scopes nest.
// The workspace is never dereferenced on the host, so plain host memory stands in for the device's.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/attn_doc_plans.h"
#include "kernels/tensor.h"

namespace rt {
namespace {

alignas(256) int64_t g_space[4096];  // (4096) int64 words: the stand-in workspace

const int64_t g_pos[3] = {0, 0, 0};  // three distinct arrays for the key's pointers

AttnDocPlanKey base_key() {
  AttnDocPlanKey k;
  k.stream = reinterpret_cast<const void*>(uintptr_t(0x10));
  k.q_pos = g_pos;
  k.q_doc_start = g_pos + 1;
  k.k_pos = g_pos + 2;
  k.q_stride = k.k_stride = 1024;
  k.B = 1;
  k.q_begin = 0, k.q_end = 512, k.k_begin = 0, k.k_end = 512;
  return k;
}

TEST(AttnDocPlans, OneKeyOnePlanPerBatch) {
  AttnDocPlans plans(0, g_space, 4096);
  const AttnDocPlanKey key = base_key();
  const int64_t words = attn_doc_plan_words(1, 512, 512);
  AttnDocPlans::Plan* a = plans.find_or_add(0, key, words);
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->summaries || a->k128_spans || a->q128_order) << "a new plan has nothing written";
  a->summaries = a->k128_spans = true;  // what the first (forward, backward) calls queue
  AttnDocPlans::Plan* b = plans.find_or_add(0, key, words);  // the next layer
  ASSERT_EQ(a, b);
  EXPECT_TRUE(b->summaries && b->k128_spans && !b->q128_order);
  EXPECT_EQ(plans.plans(), 1);
  EXPECT_EQ(plans.hits(), 1);
  EXPECT_EQ(plans.misses(), 1);
  EXPECT_EQ(plans.plan_at(plans.storage(*a)), a);
  EXPECT_EQ(plans.plan_at(g_space + 1), nullptr);

  plans.new_batch();  // new document lengths, same buffers
  EXPECT_EQ(plans.plans(), 0);
  EXPECT_EQ(plans.generation(), 1);
  EXPECT_EQ(plans.plan_at(g_space), nullptr) << "a dropped plan is not found by its storage";
  AttnDocPlans::Plan* c = plans.find_or_add(0, key, words);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->summaries || c->k128_spans || c->q128_order) << "a plan of the last batch was reused";
  EXPECT_EQ(plans.misses(), 2);
}

TEST(AttnDocPlans, EveryKeyFieldTellsPlansApart) {
  const std::vector<std::function<void(AttnDocPlanKey&)>> change = {
      [](AttnDocPlanKey& k) { k.q_pos = g_pos + 2; },         // another rank's rows
      [](AttnDocPlanKey& k) { k.q_doc_start = g_pos; },
      [](AttnDocPlanKey& k) { k.k_pos = g_pos; },             // another ring source
      [](AttnDocPlanKey& k) { k.q_stride = 2048; },
      [](AttnDocPlanKey& k) { k.k_stride = 640; },            // the gather's rows
      [](AttnDocPlanKey& k) { k.B = 2; },
      [](AttnDocPlanKey& k) { k.q_begin = 128; },
      [](AttnDocPlanKey& k) { k.q_end = 384; },
      [](AttnDocPlanKey& k) { k.k_begin = 256; },             // the gather backward's part B
      [](AttnDocPlanKey& k) { k.k_end = 256; },               // ... part A
  };
  for (size_t i = 0; i < change.size(); ++i) {
    AttnDocPlans plans(0, g_space, 4096);
    const AttnDocPlanKey key = base_key();
    AttnDocPlanKey other = key;
    change[i](other);
    ASSERT_FALSE(other == key) << "change " << i;
    AttnDocPlans::Plan* a = plans.find_or_add(0, key, 100);
    a->summaries = true;
    AttnDocPlans::Plan* b = plans.find_or_add(0, other, 100);
    ASSERT_NE(b, nullptr) << "change " << i;
    EXPECT_NE(a, b) << "change " << i << " found the plan of another call";
    EXPECT_FALSE(b->summaries) << "change " << i;
    EXPECT_NE(plans.storage(*a), plans.storage(*b)) << "change " << i;
    EXPECT_EQ(plans.find_or_add(0, key, 100), a) << "change " << i;
    EXPECT_EQ(plans.plans(), 2) << "change " << i;
  }
}

TEST(AttnDocPlans, BypassesOtherStreamsDevicesAndWhatDoesNotFit) {
  AttnDocPlans plans(1, g_space, 256);
  AttnDocPlanKey key = base_key();
  EXPECT_EQ(plans.find_or_add(0, key, 10), nullptr) << "a call on another device";
  AttnDocPlans::Plan* a = plans.find_or_add(1, key, 100);  // binds the plans to key.stream
  ASSERT_NE(a, nullptr);
  AttnDocPlanKey on_other_stream = key;
  on_other_stream.stream = reinterpret_cast<const void*>(uintptr_t(0x20));
  EXPECT_EQ(plans.find_or_add(1, on_other_stream, 100), nullptr) << "the workspace is reused in one stream's order";
  plans.new_batch();
  EXPECT_EQ(plans.find_or_add(1, on_other_stream, 100), nullptr) << "still bound after new_batch";
  a = plans.find_or_add(1, key, 100);  // words [0, 128)
  ASSERT_NE(a, nullptr);
  AttnDocPlanKey second = key;
  second.k_end = 256;
  AttnDocPlans::Plan* b = plans.find_or_add(1, second, 128);  // [128, 256): exactly full
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset, 128) << "plans start on 256-byte (32-word) boundaries";
  AttnDocPlanKey third = key;
  third.k_end = 128;
  EXPECT_EQ(plans.find_or_add(1, third, 1), nullptr) << "no room: the call computes its own set-up";
  EXPECT_EQ(plans.find_or_add(1, key, 100), a) << "the plans made still serve";
  EXPECT_EQ(plans.bypassed(), 4);

  AttnDocPlans none;
  EXPECT_EQ(none.find_or_add(0, key, 1), nullptr) << "no workspace (a measuring arena): nothing cached";
  AttnDocPlans measuring(0, nullptr, 1000);
  EXPECT_EQ(measuring.find_or_add(0, key, 1), nullptr);
  EXPECT_THROW(AttnDocPlans(0, g_space + 1, 100), Error) << "a workspace off a 256-byte boundary";
}

TEST(AttnDocPlans, ScopesNest) {
  EXPECT_EQ(current_attn_doc_plans(), nullptr) << "no scope: every call computes its set-up";
  AttnDocPlans outer, inner;
  {
    AttnDocPlanScope a(&outer);
    EXPECT_EQ(current_attn_doc_plans(), &outer);
    {
      AttnDocPlanScope b(&inner);
      EXPECT_EQ(current_attn_doc_plans(), &inner);
    }
    EXPECT_EQ(current_attn_doc_plans(), &outer);
  }
  EXPECT_EQ(current_attn_doc_plans(), nullptr);
}

TEST(AttnDocPlans, LayoutMatchesTheKernelsParts) {
  // B = 2, 5 query tiles (3 of 128 rows), 3 key tiles (2 of 128 keys), in int64 words.
  const AttnDocPlanLayout l = attn_doc_plan_layout(2, 5, 3);
  EXPECT_EQ(l.q_sum, 0);
  EXPECT_EQ(l.k_sum, 2 * 5 * 4);
  EXPECT_EQ(l.k128_span, l.k_sum + 2 * 3 * 2);
  EXPECT_EQ(l.q128_runs % 2, 0) << "longlong2 runs need 16-byte alignment";
  EXPECT_GE(l.q128_runs, l.k128_span + 2 * 2);
  EXPECT_EQ(l.q128_span, l.q128_runs + 2 * kAttnDocRuns * 2 * 3);
  EXPECT_EQ(l.q128_order, l.q128_span + 2 * 3);
  EXPECT_EQ(l.q128_nruns, l.q128_order + 3);  // 6 ints
  EXPECT_EQ(l.words, l.q128_nruns + 3);
  EXPECT_EQ(attn_doc_plan_words(2, 5 * 64 - 10, 3 * 64), l.words) << "rows round up to whole 64-row tiles";
}

}  // namespace
}  // namespace rt
