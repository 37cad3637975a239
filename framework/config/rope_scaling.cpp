// RoPE inverse frequencies per scaling type (framework/config/rope_scaling.h), in fp64.
#include "framework/config/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/tensor.h"

namespace rt {
namespace {

constexpr double kPi = 3.14159265358979323846;

// A user's config mistake: the message alone (no source location).
#define RS_REQUIRE(cond, msg)                 \
  do {                                        \
    if (!(cond)) {                            \
      std::ostringstream rs_os_;              \
      rs_os_ << msg;                          \
      throw Error(rs_os_.str());              \
    }                                         \
  } while (0)

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// yarn: the (fractional) dimension at which a frequency makes `rotations` turns over `context` positions.
double yarn_correction_dim(double rotations, double dim, double base, double context) {
  return dim * std::log(context / (rotations * 2 * kPi)) / (2 * std::log(base));
}

}  // namespace

double rope_attention_factor(const ModelConfig& m) {
  const RopeScalingConfig& s = m.rope_scaling;
  if (s.type != "yarn") return 1.0;
  if (s.attention_factor > 0) return s.attention_factor;
  return s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
}

RopeFreqs rope_frequencies(const ModelConfig& m) {
  const RopeScalingConfig& s = m.rope_scaling;
  RS_REQUIRE(m.n_head > 0 && m.d_model % m.n_head == 0 && m.head_dim() % 2 == 0,
           "RoPE needs an even head_dim = model.d_model / model.n_head (got " << m.d_model << " / " << m.n_head << ")");
  const int64_t dim = m.head_dim();
  RS_REQUIRE(dim / 2 <= kMaxRopePairs, "head_dim = " << dim << " exceeds the largest supported RoPE head dim "
                                                    << 2 * kMaxRopePairs << "; use more heads");
  const double base = double(m.rope_base);
  RS_REQUIRE(base > 1, "model.rope_base=" << m.rope_base << " must be > 1 (e.g. 10000 or 500000)");
  RopeFreqs f = RopeFreqs::plain(base, dim);
  const std::string& type = s.type;
  if (type == "none") return f;
  RS_REQUIRE(type == "linear" || type == "llama3" || type == "yarn",
           "model.rope_scaling.type='" << type << "' is not a valid choice; use one of: none, linear, llama3, yarn");
  RS_REQUIRE(s.factor > 0, "model.rope_scaling.factor=" << s.factor << " must be > 0 (the context extension ratio, e.g. 8)");
  if (type == "linear") {
    for (int i = 0; i < f.pairs; ++i) f.inv_freq[i] /= s.factor;
    return f;
  }
  const double orig = double(s.original_max_position_embeddings);
  RS_REQUIRE(orig >= 1, "model.rope_scaling.original_max_position_embeddings=" << s.original_max_position_embeddings
                                                                             << " must be >= 1 (the pretraining context)");
  if (type == "llama3") {
    RS_REQUIRE(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor,
             "model.rope_scaling.low_freq_factor=" << s.low_freq_factor << " and high_freq_factor=" << s.high_freq_factor
                                                   << " must satisfy 0 < low < high (Llama 3.1 uses 1 and 4)");
    const double low_wavelen = orig / s.low_freq_factor, high_wavelen = orig / s.high_freq_factor;
    for (int i = 0; i < f.pairs; ++i) {
      const double inv = f.inv_freq[i];
      const double wavelen = 2 * kPi / inv;
      if (wavelen < high_wavelen) continue;  // high frequency: unchanged
      if (wavelen > low_wavelen) {           // low frequency: interpolated
        f.inv_freq[i] = inv / s.factor;
        continue;
      }
      const double smooth = (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f.inv_freq[i] = (1 - smooth) * inv / s.factor + smooth * inv;
    }
    return f;
  }
  // yarn
  RS_REQUIRE(s.beta_fast > 0 && s.beta_slow > 0,
           "model.rope_scaling.beta_fast=" << s.beta_fast << " and beta_slow=" << s.beta_slow
                                           << " must be > 0 (the YaRN paper uses 32 and 1)");
  RS_REQUIRE(s.attention_factor >= 0, "model.rope_scaling.attention_factor=" << s.attention_factor
                                                                           << " must be >= 0 (0 = 0.1 ln(factor) + 1)");
  const double d = double(dim);
  double low = std::floor(yarn_correction_dim(s.beta_fast, d, base, orig));
  double high = std::ceil(yarn_correction_dim(s.beta_slow, d, base, orig));
  low = std::max(low, 0.0);
  high = std::min(high, d - 1);
  if (low == high) high += 0.001;  // as transformers: no zero-width ramp
  for (int i = 0; i < f.pairs; ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1 - ramp;  // share of the unscaled frequency
    const double inv = f.inv_freq[i];
    f.inv_freq[i] = inv / s.factor * (1 - extrapolation) + inv * extrapolation;
  }
  f.cos_sin_scale = float(rope_attention_factor(m));
  return f;
}

std::string rope_scaling_text(const RopeScalingConfig& s) {
  if (s.type == "none") return "none";
  std::string t = s.type + " (factor " + num(s.factor);
  if (s.type == "llama3")
    t += ", low_freq_factor " + num(s.low_freq_factor) + ", high_freq_factor " + num(s.high_freq_factor) +
         ", original_max_position_embeddings " + std::to_string(s.original_max_position_embeddings);
  if (s.type == "yarn")
    t += ", beta_fast " + num(s.beta_fast) + ", beta_slow " + num(s.beta_slow) + ", original_max_position_embeddings " +
         std::to_string(s.original_max_position_embeddings) + ", attention_factor " +
         (s.attention_factor > 0 ? num(s.attention_factor) : "auto");
  return t + ")";
}

}  // namespace rt
