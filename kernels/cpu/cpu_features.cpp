// Run-time choice between the AVX2+FMA and the baseline x86-64 builds of the CPU kernels' hot loops.
#include <atomic>

#include "kernels/cpu/cpu_util.h"

namespace rt {
namespace cpu {
namespace {
std::atomic<bool> force_baseline{false};
}

bool use_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && !force_baseline.load(std::memory_order_relaxed);
}

void force_baseline_simd(bool on) { force_baseline.store(on, std::memory_order_relaxed); }

}  // namespace cpu
}  // namespace rt
