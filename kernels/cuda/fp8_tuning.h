// The FP8 quantizer's kernel shape, for tests and benchmarks that compare its variants (kernels/cuda/fp8_quantize.cu):
// rows of the 128x128 tile each thread holds, 4 (512 threads per tile, the default) or 8 (256 threads). Both give
// the same bits; only the speed differs. Plain C++ (no device code), so host-compiled tests can include it.
#pragma once

namespace rt {
namespace cuda {
void set_fp8_quantize_rows(int rows);
int fp8_quantize_rows();
}  // namespace cuda
}  // namespace rt
