// framework/data/prefetch_loader.h: the loader one batch ahead hands out exactly the wrapped loader's batches in
// order, reads the following one on another thread while the caller works, counts the batches handed out (what a
// checkpoint saves), starts over at a new cursor, and raises a read-ahead batch's error where that batch is asked for.
#include <gtest/gtest.h>

#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "framework/data/prefetch_loader.h"

namespace rt {
namespace {

// Batch k holds tokens {k}; records the thread of each read; throws on the batch `fail_at`.
class CountingLoader : public DataLoader {
 public:
  Batch next() override {
    std::lock_guard<std::mutex> lock(mu);
    if (cursor_ == fail_at) throw std::runtime_error("bad batch " + std::to_string(cursor_));
    Batch b;
    b.tokens = {int32_t(cursor_)};
    threads.push_back(std::this_thread::get_id());
    ++cursor_;
    return b;
  }
  uint64_t cursor() const override { return cursor_; }
  void set_cursor(uint64_t c) override { cursor_ = c; }
  uint64_t split_tokens() const override { return 1234; }
  void set_sample_limit(uint64_t limit) override { limit_ = limit; }
  std::mutex mu;
  std::vector<std::thread::id> threads;
  uint64_t cursor_ = 0, limit_ = 0, fail_at = ~uint64_t(0);
};

TEST(PrefetchLoader, SameBatchesInOrderReadAheadOnAnotherThread) {
  auto inner = std::make_unique<CountingLoader>();
  CountingLoader* raw = inner.get();
  PrefetchLoader loader(std::move(inner));
  EXPECT_EQ(loader.split_tokens(), 1234u);
  for (int32_t k = 0; k < 6; ++k) {
    EXPECT_EQ(loader.cursor(), uint64_t(k));
    const Batch b = loader.next();
    ASSERT_EQ(b.tokens.size(), 1u);
    EXPECT_EQ(b.tokens[0], k);
  }
  EXPECT_EQ(loader.cursor(), 6u);
  loader.set_cursor(6);  // waits for the batch in flight
  std::lock_guard<std::mutex> lock(raw->mu);
  ASSERT_GE(raw->threads.size(), 6u);
  EXPECT_EQ(raw->threads[0], std::this_thread::get_id()) << "the first batch has nothing to overlap with";
  for (size_t i = 1; i < raw->threads.size(); ++i)
    EXPECT_NE(raw->threads[i], std::this_thread::get_id()) << "batch " << i << " was not read ahead";
}

TEST(PrefetchLoader, SetCursorDropsTheBatchReadAheadAndResumes) {
  PrefetchLoader loader(std::make_unique<CountingLoader>());
  loader.next();
  loader.next();  // batch 2 now in flight
  loader.set_cursor(10);
  EXPECT_EQ(loader.cursor(), 10u);
  EXPECT_EQ(loader.next().tokens[0], 10);
  EXPECT_EQ(loader.next().tokens[0], 11);
  loader.set_sample_limit(5);  // drops batch 12 in flight; the next batch is still 12
  EXPECT_EQ(loader.next().tokens[0], 12);
}

TEST(PrefetchLoader, AReadAheadErrorSurfacesWhenItsBatchIsAsked) {
  auto inner = std::make_unique<CountingLoader>();
  inner->fail_at = 2;
  PrefetchLoader loader(std::move(inner));
  EXPECT_EQ(loader.next().tokens[0], 0);
  EXPECT_EQ(loader.next().tokens[0], 1);  // batch 2 fails on the reader thread, unseen yet
  EXPECT_THROW(loader.next(), std::runtime_error);
}

}  // namespace
}  // namespace rt
