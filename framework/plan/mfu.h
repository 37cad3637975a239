// Model FLOPs and MFU (DESIGN.md "Metrics and output"):
//   MFU = (6 * P_matmul + 6 * L * d * T) * tokens_per_s / (peak * devices)
// P_matmul: parameters used in matmuls (every weight except the token-embedding lookup; the LM head counts,
// tied or not). 6 * L * d * T is the attention score and value work (fwd + bwd) with causal attention
// counted at half; T is the context length (data.seq_len). Recompute under activation checkpointing is
// not counted (it is "model" FLOPs, not hardware FLOPs). With packed documents the attention term counts each
// step's visible (query, key) pairs (Batch::visible_pairs summed over the ranks): FlopsModel::per_step.
#pragma once
#include <cstdint>
#include <string>

#include "framework/config/config.h"
#include "kernels/tensor.h"

namespace rt {

struct FlopsModel {
  int64_t params_matmul = 0;  // P_matmul
  int64_t n_layer = 0, d_model = 0, seq_len = 0;
  double per_token() const;   // 6 * P_matmul + 6 * L * d * T
  std::string formula() const;  // the formula with the numbers filled in
  // Packed documents (data.documents: eot): attention counts the visible (query, key) pairs instead of T/2 per
  // token: 12 * L * d per pair (forward 4 d: scores and values; backward 8 d), all layers.
  double attention_per_pair() const { return 12.0 * double(n_layer) * double(d_model); }
  double per_step(double tokens, double visible_pairs) const {  // 6 * P_matmul * tokens + 12 * L * d * pairs
    return 6.0 * double(params_matmul) * tokens + attention_per_pair() * visible_pairs;
  }
  std::string documents_formula() const;
};
FlopsModel flops_model(const Config& config);

// Dense bf16 peak TFLOP/s by GPU name (H100/H200: 989); 0 when unknown.
double peak_tflops_for_gpu(const std::string& gpu_name);
// The peak to divide by: log.peak_tflops when set, else the table for `device` (0 on CPU: MFU not shown).
double peak_tflops(const Config& config, Device device);
// The device's name: the GPU's marketing name, or "cpu".
std::string device_name(Device device);

// Dense FP8 (E4M3) tensor-core peak TFLOP/s by GPU name (H100/H200: 1979); 0 when unknown or none. Shown beside
// MFU under train.precision: fp8; MFU itself stays against the bf16 peak.
double fp8_peak_tflops_for_gpu(const std::string& gpu_name);
// The device's compute capability as major * 10 + minor (90 for Hopper); 0 on the CPU or when it cannot be read.
int compute_capability(Device device);
// train.precision: fp8 on a GPU without FP8 tensor cores (compute capability below 8.9; the block recipe's
// block-scaled GEMMs need 9.0): the problem and the fix, else "". The CPU emulates FP8 and is always allowed.
std::string fp8_device_problem(const Config& config, Device device);

// Fraction of peak, 0 when peak_tflops is 0.
double mfu(const FlopsModel& flops, double tokens_per_s, double peak_tflops, int devices);
// Fraction of peak of a model FLOP rate (FlopsModel::per_step / seconds), 0 when peak_tflops is 0.
double mfu_of_rate(double flops_per_s, double peak_tflops, int devices);

}  // namespace rt
