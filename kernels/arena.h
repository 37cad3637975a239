// One arena per device, sized at start-up; a training step allocates nothing (DESIGN.md "Core types").
// A measuring arena (no backing storage) tallies bytes so the real one can be sized exactly.
#pragma once
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace rt {

class Arena {
 public:
  // Measuring arena: alloc() returns tensors with null data and only counts bytes.
  static Arena measuring(Device device);
  // Real arena of `capacity` bytes on `device` (cudaMalloc once on CUDA, aligned malloc on CPU).
  Arena(Device device, size_t capacity);
  ~Arena();
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&&) = delete;
  Arena(const Arena&) = delete;

  // 256-byte aligned. Throws rt::Error naming `what` and the sizes when capacity is exceeded.
  Tensor alloc(DType dtype, std::initializer_list<int64_t> dims, const char* what);
  // Scratch allocations can be released back to a mark.
  size_t mark() const { return used_; }
  void release_to(size_t mark) { used_ = mark; }

  Device device() const { return device_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return capacity_; }
  bool is_measuring() const { return base_ == nullptr; }
  // The largest named allocations so far, for `ringtrain plan`'s "what dominates".
  struct Entry { std::string what; size_t bytes; };
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  Arena() = default;
  Device device_{};
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0, peak_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace rt
