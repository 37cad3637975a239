#include "kernels/arena.h"

#include <algorithm>

#include "kernels/device_memory.h"

namespace rt {

namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Arena Arena::measuring(Device device) {
  Arena a;
  a.device_ = device;
  a.capacity_ = size_t(-1);
  return a;
}

Arena::Arena(Device device, size_t capacity) : device_(device), capacity_(align_up(capacity)) {
  base_ = static_cast<char*>(device_alloc(device, capacity_));
}

Arena::~Arena() { device_free(device_, base_); }

Arena::Arena(Arena&& o) noexcept
    : device_(o.device_), base_(o.base_), capacity_(o.capacity_), used_(o.used_), peak_(o.peak_),
      entries_(std::move(o.entries_)) {
  o.base_ = nullptr;
}

Tensor Arena::alloc(DType dtype, std::initializer_list<int64_t> dims, const char* what) {
  Tensor t(nullptr, dtype, device_, dims);
  const size_t bytes = align_up(t.nbytes());
  RT_CHECK(used_ + bytes <= capacity_,
           "arena on " << device_.str() << " is full: '" << what << "' " << t.shape_str() << " needs " << bytes
                       << " bytes, " << (capacity_ - used_) << " of " << capacity_
                       << " left. Reduce data.seq_len or train.batch_size, or enable activation checkpointing");
  // A real arena hands out memory; a measuring one hands out a non-null marker so views still work.
  t.data = base_ ? base_ + used_ : reinterpret_cast<void*>(kAlign + used_);
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  entries_.push_back({what, bytes});
  return t;
}

}  // namespace rt
