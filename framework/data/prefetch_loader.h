// The training loader one batch ahead (DESIGN.md "Data and ring"): while a step runs, the next batch is read and
// planned (packed documents: the layout and the ring / gather scheme chosen per sample by predicted time,
// parallel/schedule/doc_balance.h) on a background thread, so that host work leaves the step's critical path. Batches come
// out in the same order and with the same contents as from the wrapped loader; an error of a batch read ahead is
// raised by the next() that hands that batch out.
#pragma once
#include <future>
#include <memory>

#include "framework/data/data.h"

namespace rt {

class PrefetchLoader : public DataLoader {
 public:
  explicit PrefetchLoader(std::unique_ptr<DataLoader> inner);
  ~PrefetchLoader() override;  // waits for a batch in flight (its error, if any, is dropped)

  Batch next() override;                   // the batch read ahead (or read now), then starts reading the following
  uint64_t cursor() const override;        // batches handed out, as the wrapped loader counts them
  void set_cursor(uint64_t cursor) override;  // drops a batch in flight
  uint64_t split_tokens() const override;
  void set_sample_limit(uint64_t limit) override;  // drops a batch in flight

 private:
  void drop_pending();  // waits for the batch in flight and discards it (and its error)
  std::unique_ptr<DataLoader> inner_;  // touched only by the reader thread while pending_ is valid
  std::future<Batch> pending_;
  uint64_t cursor_ = 0;        // batches handed out
  uint64_t split_tokens_ = 0;  // the wrapped loader's, read at construction
};

}  // namespace rt
