// The RAII timer kernels/ops.cpp puts around every CUDA op (rt::op_profile_*, kernels/op_profile.h): records
// a start event on construction and a stop event on destruction, only while a profile window is open.
#pragma once
#include <cuda_runtime.h>

namespace rt {
namespace cuda {

class OpProfileScope {
 public:
  explicit OpProfileScope(const char* name);  // name: a string literal (kept by pointer)
  ~OpProfileScope();
  OpProfileScope(const OpProfileScope&) = delete;
  OpProfileScope& operator=(const OpProfileScope&) = delete;

 private:
  const char* name_ = nullptr;
  cudaEvent_t start_ = nullptr;
};

}  // namespace cuda
}  // namespace rt
