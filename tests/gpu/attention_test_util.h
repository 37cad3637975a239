// Shared pieces of the attention GPU tests: an error measure for LSE rows that may be -inf.
#pragma once
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {

// Max |out - ref| over rows, where a -inf reference must be matched by -inf exactly. Infinity on a
// mismatch of infinities or any NaN.
inline double lse_max_abs_error(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) return INFINITY;
    if (std::isinf(ref[i]) || std::isinf(out[i])) {
      if (out[i] != ref[i]) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(double(out[i]) - double(ref[i])));
  }
  return worst;
}

}  // namespace rt::test
