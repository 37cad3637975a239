// Shared pieces of the attention GPU tests: an error measure for LSE rows that may be -inf, an AttnMask
// builder, and a scoped environment variable (to force a kernel variant).
#pragma once
#include <cstdlib>
#include <string>

#include "kernels/attention.h"
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

// Sets an environment variable for its scope and restores the old value (or its absence) after; the
// attention dispatch reads RT_ATTN_FWD_VARIANT / RT_ATTN_BWD_VARIANT on every call.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_old_ = old != nullptr;
    if (had_old_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_old_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_old_ = false;
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
