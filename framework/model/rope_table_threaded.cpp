// build_rope_table_threaded (framework/model/rope_table_threaded.h).
#include "framework/model/rope_table_threaded.h"

#include <algorithm>
#include <thread>

#include "kernels/rope_table.h"

namespace rt {

void build_rope_table_threaded(std::vector<float>& table, const int32_t* positions, int64_t n, const double* inv_freq,
                               int32_t pairs, double cos_sin_scale, int max_threads) {
  constexpr int64_t kMinPerThread = 8192;
  const int64_t hw = max_threads > 0 ? max_threads : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  const int64_t threads = std::clamp<int64_t>(n / kMinPerThread, 1, hw);
  if (threads == 1) {
    build_rope_table(table, positions, n, inv_freq, pairs, cos_sin_scale);
    return;
  }
  const size_t row = size_t(pairs) * 2;  // floats per position
  table.resize(size_t(n) * row);         // (n, pairs, 2)
  std::vector<std::thread> workers;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
    workers.emplace_back([&, begin, end] {
      std::vector<float> part;  // (end - begin, pairs, 2)
      build_rope_table(part, positions + begin, end - begin, inv_freq, pairs, cos_sin_scale);
      std::copy(part.begin(), part.end(), table.begin() + std::ptrdiff_t(size_t(begin) * row));
    });
  }
  for (std::thread& w : workers) w.join();
}

}  // namespace rt
