// Shared pieces of the attention GPU tests: an error measure for LSE rows that may be -inf, an AttnMask
// builder, and a scoped override of the attention kernel variant.
#pragma once
#include <cstdlib>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/attention/attn_variant.h"
#include "tests/gpu/gpu_test_util.h"

namespace rt::test {

inline AttnMask mask(bool causal, int64_t q_off, int64_t k_off, int64_t qb = 0, int64_t qe = -1, int64_t kb = 0,
                     int64_t ke = -1) {
  AttnMask m;
  m.causal = causal;
  m.q_offset = q_off, m.k_offset = k_off;
  m.q_begin = qb, m.q_end = qe, m.k_begin = kb, m.k_end = ke;
  return m;
}

// Forces attention kernel variants for its scope through rt::cuda::set_attn_variant_override (the environment is
// read once per process) and restores the previous overrides after. fwd / bwd: "2".."5" (or nullptr: unchanged).
class ScopedAttnVariant {
 public:
  ScopedAttnVariant(const char* fwd, const char* bwd) : old_(cuda::attn_variant_override()) {
    cuda::AttnVariantOverride o = old_;
    if (fwd != nullptr) o.fwd = std::atoi(fwd);
    if (bwd != nullptr) o.bwd = std::atoi(bwd);
    cuda::set_attn_variant_override(o);
  }
  ~ScopedAttnVariant() { cuda::set_attn_variant_override(old_); }
  ScopedAttnVariant(const ScopedAttnVariant&) = delete;
  ScopedAttnVariant& operator=(const ScopedAttnVariant&) = delete;

 private:
  cuda::AttnVariantOverride old_;
};

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
