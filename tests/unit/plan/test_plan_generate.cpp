// `ringtrain generate`'s plan (framework/plan/plan_generate.h) with the chunked prefill: the ranks hold each chunk
// in order, the layout counts every prompt row once, --prefill-chunk is taken as given, and auto chunks
// only when the one-pass prefill does not fit, then into the fewest chunks that fit (one chunk fewer does not).
// CUDA plans are measured without a GPU (the arena only counts).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "framework/config/config.h"
#include "framework/plan/plan_generate.h"

namespace rt {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

Config load(const std::string& name, std::vector<std::string> sets = {}) {
  sets.push_back("device=auto");  // the configs may say cuda; a CPU-only build validates them as auto
  Config c = load_config(std::string(RINGTRAIN_SOURCE_DIR) + "/configs/" + name, sets, 0);
  prepare_generate_config(c);
  return c;
}

TEST(GenerateChunks, RanksHoldEveryRowOfAChunkOnceAndTheSlotsGoRound) {
  // A chunk of `valid` prompt tokens, n rows per rank: the rank in slot p holds [p n, (p + 1) n) below valid.
  for (int64_t n : {1, 3, 8})
    for (int cp : {1, 2, 4})
      for (int64_t valid = 1; valid <= cp * n; ++valid)
        for (int64_t chunk = 0; chunk < 2 * cp; ++chunk) {
          std::vector<int> slots;
          int64_t total = 0;
          for (int r = 0; r < cp; ++r) {
            const int64_t slot = prefill_chunk_slot(r, chunk, cp);
            slots.push_back(int(slot));
            const int64_t rows = chunk_rows_in_slot(valid, n, slot);
            EXPECT_EQ(rows, std::max<int64_t>(0, std::min(n, valid - slot * n))) << n << " " << cp << " " << valid;
            total += rows;
          }
          std::sort(slots.begin(), slots.end());
          for (int p = 0; p < cp; ++p) EXPECT_EQ(slots[size_t(p)], p) << "every slot held once";
          EXPECT_EQ(total, valid) << "n " << n << " cp " << cp << " valid " << valid;
        }
  // One-token chunks go round the ranks: cp of them put one row on every rank.
  for (int cp : {2, 4, 8}) {
    std::vector<int64_t> rows(size_t(cp), 0);
    for (int64_t chunk = 0; chunk < cp; ++chunk)
      for (int r = 0; r < cp; ++r) rows[size_t(r)] += chunk_rows_in_slot(1, 1, prefill_chunk_slot(r, chunk, cp));
    EXPECT_EQ(rows, std::vector<int64_t>(size_t(cp), 1)) << "cp " << cp;
  }
}

TEST(GenerateChunks, LayoutCachesEveryPromptRowOnceAndSizesTheCache) {
  for (int cp : {1, 2, 4}) {
    const Config c = load("tiny.yaml", {"parallel.cp=" + std::to_string(cp)});
    for (int64_t chunk : {1, 7, 98}) {
      const int64_t prompt = 100, fresh = 10, Pp = prompt - 1;
      const GenerateLayout g = generate_layout(c, prompt, fresh, chunk);
      const std::string where = "cp " + std::to_string(cp) + " chunk " + std::to_string(chunk);
      EXPECT_EQ(g.chunk, chunk) << where;
      EXPECT_EQ(g.chunks, (Pp + chunk - 1) / chunk) << where;
      EXPECT_EQ(g.rows_per_rank, (chunk + cp - 1) / cp) << where;
      EXPECT_TRUE(g.order.empty()) << where;
      EXPECT_EQ(std::accumulate(g.shard_rows.begin(), g.shard_rows.end(), int64_t(0)), Pp) << where;
      const int64_t most = *std::max_element(g.shard_rows.begin(), g.shard_rows.end());
      EXPECT_EQ(g.capacity, std::max(most, (prompt + fresh + cp - 1) / cp) + 1) << where;
      // A layout of its own: every chunk's rows summed per rank.
      std::vector<int64_t> rows(size_t(cp), 0);
      for (int64_t start = 0, c = 0; start < Pp; start += chunk, ++c)
        for (int r = 0; r < cp; ++r)
          rows[size_t(r)] += chunk_rows_in_slot(std::min(chunk, Pp - start), g.rows_per_rank, (r + c) % cp);
      EXPECT_EQ(rows, g.shard_rows) << where;
      const int64_t least = *std::min_element(g.shard_rows.begin(), g.shard_rows.end());
      EXPECT_LE(most - least, g.rows_per_rank) << where << ": the shards stay even";
    }
    // A chunk that holds the whole prefill is the one pass.
    const GenerateLayout whole = generate_layout(c, 100, 10, 99);
    EXPECT_EQ(whole.chunk, 0);
    EXPECT_EQ(whole.chunks, 1);
    EXPECT_EQ(int64_t(whole.order.size()), whole.prefill_len);
  }
  EXPECT_THROW(generate_layout(load("tiny.yaml"), 100, 10, -1), Error);
}

TEST(GenerateChunks, ExplicitChunkIsTakenAndNamed) {
  const Config c = load("tiny.yaml", {"parallel.cp=1"});
  const GeneratePlan p = plan_generate(c, Device::cpu(), 50, 4, PrefillChunking{7, 0, ""});
  EXPECT_EQ(p.layout.chunk, 7);
  EXPECT_EQ(p.layout.chunks, 7);  // 49 prefill tokens
  EXPECT_EQ(p.chunk_note, "--prefill-chunk 7");
  const GeneratePlan one = plan_generate(c, Device::cpu(), 50, 4, PrefillChunking{49, 0, ""});
  EXPECT_EQ(one.layout.chunk, 0);
  EXPECT_TRUE(one.chunk_note.empty());
}

// The 8B shape generating from a prompt of its whole 2M context on its 8-GPU ring, with 64 GiB a GPU: the one-pass
// prefill (262,136 tokens per rank; a forward-only model keeps no activations, gradients, f32 masters or attention
// backward buffers, so on 139 GiB it fits, at ~76 GiB) does not fit; auto chunks it into the fewest even chunks that do, each sharded over
// the 8 ranks, the cache sharded as before.
TEST(GenerateChunks, AutoChunksTheFewestThatFitOnlyWhenOnePassDoesNot) {
  const Config c = load("llama3-8b-2m-8gpu.yaml");
  ASSERT_EQ(c.parallel.cp, 8);
  const int64_t fresh = 64, prompt = (int64_t(1) << 21) - fresh, Pp = prompt - 1;
  const double limit = 64 * kGiB;
  const PrefillChunking auto_chunk{0, limit, "the GPU"};
  EXPECT_LE(plan_generate(c, Device::cuda(0), prompt, fresh).device_bytes(), 139 * kGiB)
      << "the one pass fits an H200's 139 GiB";
  const GeneratePlan whole = plan_generate(c, Device::cuda(0), prompt, fresh);
  ASSERT_EQ(whole.layout.chunk, 0);
  ASSERT_GT(whole.device_bytes(), limit) << whole.device_bytes() / kGiB << " GiB";
  const GeneratePlan p = plan_generate(c, Device::cuda(0), prompt, fresh, auto_chunk);
  ASSERT_GT(p.layout.chunk, 0);
  EXPECT_LE(p.device_bytes(), limit) << p.device_bytes() / kGiB << " GiB in " << p.layout.chunks << " chunks";
  const int64_t even = (Pp + p.layout.chunks - 1) / p.layout.chunks;
  EXPECT_EQ(p.layout.chunk, (even + 7) / 8 * 8) << "even chunks, a multiple of cp";
  EXPECT_EQ(p.layout.rows_per_rank, p.layout.chunk / 8);
  EXPECT_EQ(p.one_pass_bytes, whole.device_bytes());
  EXPECT_NE(p.chunk_note.find("more than the"), std::string::npos) << p.chunk_note;
  EXPECT_NE(p.chunk_note.find("the GPU"), std::string::npos) << p.chunk_note;
  EXPECT_EQ(p.kv_bytes, whole.kv_bytes) << "the cache holds the same rows, sharded over cp either way";
  ASSERT_GT(p.layout.chunks, 1);
  const int64_t fewer = (Pp + p.layout.chunks - 2) / (p.layout.chunks - 1);  // one chunk fewer
  const GeneratePlan bigger = plan_generate(c, Device::cuda(0), prompt, fresh, PrefillChunking{fewer, limit, ""});
  EXPECT_GT(bigger.device_bytes(), limit) << p.layout.chunks - 1 << " chunks of " << fewer << " would fit too";
  // With room for the one pass, auto does not chunk; with room for nothing, it plans one-token chunks (refused by
  // generate_memory_problem when the arenas alone exceed the memory).
  EXPECT_EQ(plan_generate(c, Device::cuda(0), prompt, fresh, PrefillChunking{0, 1024 * kGiB, ""}).layout.chunk, 0);
  const GeneratePlan none = plan_generate(c, Device::cuda(0), prompt, fresh, PrefillChunking{0, 10 * kGiB, "x"});
  EXPECT_EQ(none.layout.chunk, 1);
  EXPECT_NE(none.chunk_note.find("no chunk fits"), std::string::npos) << none.chunk_note;
  EXPECT_NE(generate_memory_problem(none, 10 * kGiB, "x").find("prefilled in"), std::string::npos);
}

}  // namespace
}  // namespace rt
