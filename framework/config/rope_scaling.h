// RoPE frequencies for a model config, computed once per run on the host in fp64 (DESIGN.md "Checkpoints",
// "RoPE scaling"). The rules follow Hugging Face transformers' modeling_rope_utils (5.x):
//   base:    inv_freq[i] = rope_base^(-2i/head_dim)
//   linear:  inv_freq / factor
//   llama3:  wavelength w = 2 pi / inv_freq; w < orig/high_freq_factor: kept; w > orig/low_freq_factor:
//            / factor; between: s = (orig/w - low)/(high - low), (1 - s) inv/factor + s inv
//   yarn:    ramp over dims [floor(d(beta_fast)), ceil(d(beta_slow))], d(r) = dim ln(orig/(2 pi r)) / (2 ln base)
//            clamped to [0, dim-1]; inv = inv/factor * ramp + inv * (1 - ramp); cos and sin are multiplied by
//            attention_factor (0 = 0.1 ln(factor) + 1, or 1 when factor <= 1)
// (orig = original_max_position_embeddings.)
#pragma once
#include <string>

#include "framework/config/config.h"
#include "kernels/rope_freqs.h"

namespace rt {

// Throws rt::Error naming the key when the scaling parameters cannot be used (config validation calls it).
RopeFreqs rope_frequencies(const ModelConfig& model);
// The attention factor yarn applies (1 for the other types).
double rope_attention_factor(const ModelConfig& model);
// "llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192)" etc.
std::string rope_scaling_text(const RopeScalingConfig& scaling);

}  // namespace rt
