// Checks for every CUDA and cuBLAS call and every launch, reporting file:line (DESIGN.md style).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/tensor.h"

#define CUDA_CHECK(call)                                                                         \
  do {                                                                                           \
    cudaError_t rt_err_ = (call);                                                                \
    if (rt_err_ != cudaSuccess)                                                                  \
      ::rt::fail_at(__FILE__, __LINE__, std::string("CUDA error: ") + cudaGetErrorString(rt_err_) \
                                            + " in " #call);                                     \
  } while (0)

// After every kernel launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                                        \
  do {                                                                                            \
    cublasStatus_t rt_st_ = (call);                                                               \
    if (rt_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      ::rt::fail_at(__FILE__, __LINE__, std::string("cuBLAS error ") + std::to_string(int(rt_st_)) \
                                            + " in " #call);                                      \
  } while (0)
