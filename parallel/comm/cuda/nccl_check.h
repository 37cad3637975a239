// NCCL_CHECK: every NCCL call is checked; a failure is an rt::Error naming the call, NCCL's own message and
// file:line (DESIGN.md style, like CUDA_CHECK in kernels/cuda/check.h).
#pragma once
#include <nccl.h>

#include <string>

#include "kernels/tensor.h"

#define NCCL_CHECK(call)                                                                               \
  do {                                                                                                 \
    ncclResult_t rt_nccl_rc_ = (call);                                                                 \
    if (rt_nccl_rc_ != ncclSuccess && rt_nccl_rc_ != ncclInProgress)                                   \
      ::rt::fail_at(__FILE__, __LINE__, std::string("NCCL error: ") + ncclGetErrorString(rt_nccl_rc_) \
                                            + " in " #call + ::rt::nccl_last_error_suffix());          \
  } while (0)

namespace rt {
// " (<ncclGetLastError text>)" when NCCL recorded one, else "".
std::string nccl_last_error_suffix();
}  // namespace rt
