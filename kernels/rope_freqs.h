// The RoPE frequencies of one model: inverse frequencies per rotated pair, computed on the host in fp64
// (framework/config/rope_scaling.cpp applies the linear / llama3 / yarn rules), and a factor that multiplies cos and
// sin (yarn's attention factor; 1 otherwise). Passed by value to the kernels (CUDA: as a kernel argument,
// about 1 KiB), so no device buffer holds it. Kept C++17 (nvcc compiles it).
#pragma once
#include <cmath>
#include <cstdint>

namespace rt {

constexpr int kMaxRopePairs = 128;  // head_dim <= 256

struct RopeFreqs {
  int32_t pairs = 0;                    // head_dim / 2
  float cos_sin_scale = 1.f;            // multiplies cos and sin (yarn attention factor)
  double inv_freq[kMaxRopePairs] = {};  // (pairs) radians per position

  // Plain RoPE: inv_freq[i] = base^(-2i/head_dim), no scaling.
  static RopeFreqs plain(double base, int64_t head_dim) {
    RopeFreqs f;
    f.pairs = int32_t(head_dim / 2);
    for (int32_t i = 0; i < f.pairs && i < kMaxRopePairs; ++i)
      f.inv_freq[i] = std::pow(base, -2.0 * double(i) / double(head_dim));
    return f;
  }
};

}  // namespace rt
