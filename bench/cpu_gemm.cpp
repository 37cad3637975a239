// CPU gemm throughput on the linear-layer shape (1024x256) @ (1024x256)^T, one core.
// Performance is measured here, never in tests. Usage: bench_cpu_gemm [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/ops.h"

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 20;
  const int64_t M = 1024, N = 1024, K = 256;
  std::vector<float> a(M * K), b(N * K), c(M * N);  // (M,K), (N,K), (M,N)
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& x : a) x = normal(rng);
  for (auto& x : b) x = normal(rng);
  rt::Tensor ta(a.data(), rt::DType::f32, rt::Device::cpu(), {M, K});
  rt::Tensor tb(b.data(), rt::DType::f32, rt::Device::cpu(), {N, K});
  rt::Tensor tc(c.data(), rt::DType::f32, rt::Device::cpu(), {M, N});
  rt::gemm(tc, ta, tb, false, true);  // warm-up
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    rt::gemm(tc, ta, tb, false, true);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  std::printf("cpu gemm (%lldx%lld)@(%lldx%lld)^T: median %.3f ms, %.1f GFLOP/s over %d runs\n", (long long)M,
              (long long)K, (long long)N, (long long)K, med * 1e3, 2.0 * M * N * K / med * 1e-9, repeats);
  return 0;
}
