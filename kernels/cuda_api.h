// The part of the CUDA backend that the layers above kernels/ may use (parallel/*/cuda, bench, tests): the checks
// (CUDA_CHECK, CUDA_CHECK_LAUNCH, CUBLAS_CHECK: every CUDA call and launch checked, reported with file:line) and
// the per-device runtime (rt::cuda::init, current_stream / set_current_stream, stream_for, host_wait /
// host_wait_event and their count, device_props, device_slot). Everything else under kernels/cuda/ is private
// to the backend. Only for CUDA builds (RINGTRAIN_HAVE_CUDA); keep it C++17 (nvcc compiles it).
#pragma once
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
