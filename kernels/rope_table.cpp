// build_rope_table: the fp64 host side of the RoPE table (kernels/rope_table.h).
#include "kernels/rope_table.h"

#include <cmath>

#include "kernels/tensor.h"

namespace rt {

void build_rope_table(std::vector<float>& table, const int32_t* positions, int64_t n, const double* inv_freq,
                      int32_t pairs, double cos_sin_scale) {
  RT_CHECK(n >= 0 && pairs > 0, "rope table: " << n << " positions and " << pairs << " pairs (need pairs > 0)");
  table.resize(size_t(n) * size_t(pairs) * 2);  // (n, pairs, 2)
  for (int64_t t = 0; t < n; ++t) {
    const double pos = double(positions[t]);
    float* row = table.data() + size_t(t) * size_t(pairs) * 2;  // (pairs, 2)
    for (int32_t i = 0; i < pairs; ++i) {
      const double angle = pos * inv_freq[i];  // std::cos / std::sin reduce large angles exactly in fp64
      row[2 * i] = float(cos_sin_scale * std::cos(angle));
      row[2 * i + 1] = float(cos_sin_scale * std::sin(angle));
    }
  }
}

}  // namespace rt
