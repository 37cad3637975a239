// Next-token choice for `ringtrain generate` (framework/eval/generate.h): greedy, or sampling with a temperature,
// top-k and top-p (nucleus), from a seeded generator. Pure host code on one row of logits.
#pragma once
#include <cstdint>
#include <string>

namespace rt {

struct SamplingParams {
  double temperature = 0;  // 0: greedy (argmax; the lowest id among equal maxima)
  int64_t top_k = 0;       // 0: all ids; else only the k most likely
  double top_p = 1;        // keep the most likely ids whose probabilities sum to >= top_p (1: all)
  uint64_t seed = 0;
};
// "" or what is wrong with the parameters, naming the option and a value that works.
std::string check_sampling(const SamplingParams& p);

// A small generator whose sequence is the same on every platform (splitmix64), so a seed reproduces a generation.
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}
  double uniform();  // [0, 1), 53 bits
 private:
  uint64_t state_;
};

// logits (V) f32 -> the chosen id. Greedy when temperature is 0 (the generator is not advanced).
int32_t choose_token(const float* logits, int64_t V, const SamplingParams& p, SampleRng& rng);

}  // namespace rt
