// framework/eval/sampling.h.
#include "framework/eval/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace rt {

std::string check_sampling(const SamplingParams& p) {
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    return "--temperature " + std::to_string(p.temperature) + " must be >= 0 (0 = greedy; e.g. 0.7 to sample)";
  if (p.top_k < 0) return "--top-k " + std::to_string(p.top_k) + " must be >= 0 (0 = no limit; e.g. 50)";
  if (!(p.top_p > 0 && p.top_p <= 1))
    return "--top-p " + std::to_string(p.top_p) + " must be in (0, 1] (1 = no limit; e.g. 0.9)";
  return "";
}

double SampleRng::uniform() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return double(z >> 11) * (1.0 / 9007199254740992.0);
}

int32_t choose_token(const float* logits, int64_t V, const SamplingParams& p, SampleRng& rng) {
  if (p.temperature == 0) return int32_t(std::max_element(logits, logits + V) - logits);
  // Candidates by descending logit (ties: lower id first), cut to top_k, then softmax at the temperature in fp64.
  std::vector<int32_t> ids(static_cast<size_t>(V));  // (V)
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t k = p.top_k > 0 ? std::min(p.top_k, V) : V;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), by_logit);
  ids.resize(size_t(k));
  std::vector<double> prob(ids.size());  // (k)
  const double top = double(logits[ids[0]]);
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum += prob[i] = std::exp((double(logits[ids[i]]) - top) / p.temperature);
  for (double& q : prob) q /= sum;
  size_t keep = prob.size();
  if (p.top_p < 1) {  // the smallest prefix whose mass reaches top_p
    double mass = 0;
    for (keep = 0; keep < prob.size();) {
      mass += prob[keep++];
      if (mass >= p.top_p) break;
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += prob[i];
  double u = rng.uniform() * kept;
  for (size_t i = 0; i < keep; ++i) {
    if (u < prob[i]) return ids[i];
    u -= prob[i];
  }
  return ids[keep - 1];
}

}  // namespace rt
