// PrefetchLoader (framework/data/prefetch_loader.h).
#include "framework/data/prefetch_loader.h"

#include "kernels/tensor.h"

namespace rt {

PrefetchLoader::PrefetchLoader(std::unique_ptr<DataLoader> inner) : inner_(std::move(inner)) {
  RT_CHECK(inner_, "PrefetchLoader: no loader to wrap");
  cursor_ = inner_->cursor();
  split_tokens_ = inner_->split_tokens();
}

PrefetchLoader::~PrefetchLoader() { drop_pending(); }

void PrefetchLoader::drop_pending() {
  if (!pending_.valid()) return;
  try {
    pending_.get();
  } catch (...) {  // a batch nobody will use: its error is not this caller's
  }
}

Batch PrefetchLoader::next() {
  Batch batch = pending_.valid() ? pending_.get() : inner_->next();
  ++cursor_;
  DataLoader* inner = inner_.get();
  pending_ = std::async(std::launch::async, [inner] { return inner->next(); });
  return batch;
}

uint64_t PrefetchLoader::cursor() const { return cursor_; }

void PrefetchLoader::set_cursor(uint64_t cursor) {
  drop_pending();
  inner_->set_cursor(cursor);
  cursor_ = cursor;
}

uint64_t PrefetchLoader::split_tokens() const { return split_tokens_; }  // read once: no call while one is in flight

void PrefetchLoader::set_sample_limit(uint64_t limit) {
  drop_pending();
  inner_->set_sample_limit(limit);
  inner_->set_cursor(cursor_);  // the dropped batch was read past cursor_
}

}  // namespace rt
