#include "framework/run/precision_report.h"

#include <cstdio>

#include "framework/plan/mfu.h"

namespace rt {

double fp8_peak_tflops(const Config& config, Device device) {
  if (config.train.precision != "fp8" || device.is_cpu()) return 0;
  return fp8_peak_tflops_for_gpu(device_name(device));
}

std::string precision_line(const Config& config, Device device, double bf16_peak) {
  const bool cpu = device.is_cpu();
  if (config.train.precision != "fp8")
    return cpu ? "precision: bf16 (on the CPU: every GEMM in f32)" : "precision: bf16 (GEMMs in bf16, f32 accumulation)";
  const int L = config.model.n_layer;
  const std::string blocks = config.fp8.bf16_first_last ? "blocks 1.." + std::to_string(L - 2) +
                                                              " in FP8 (the first and the last in bf16)"
                                                        : "every block in FP8";
  const std::string scaling = config.fp8.recipe == "tensorwise" ? "one factor per tensor"
                              : config.fp8.recipe == "rowwise"  ? "one factor per row of each operand"
                                                                : "1x128 activation / gradient blocks, 128x128 weight blocks";
  std::string line = "precision: fp8 (fp8.recipe: " + config.fp8.recipe + ", " + scaling + "; E4M3 operands of QKV, "
                     "attn.wo and the MLP's projections, forward, data and weight gradients; " + blocks +
                     "; current scaling: this step's amax, so checkpoints hold no scaling state" +
                     (cpu ? "; the CPU emulates the FP8 rounding" : "") + ")";
  if (config.fp8.attention)
    line += " | fp8.attention: the attention backward's dV, dQ, dK on E4M3 operands (Q, K, dO per 128-row block, P "
            "x448, dS per 128x128 tile, f32 sums); its forward and dP stay " + std::string(cpu ? "f32" : "bf16") +
            (cpu ? "" : "; the sm_90a kernel over each whole sequence");
  if (config.fp8.attention && config.fp8.attention_kv == "e4m3")
    line += " | fp8.attention_kv: e4m3: K and V rounded to E4M3 once per layer (a factor per 128 rows and K/V head), "
            "attention computes on the rounded values and the ring's K/V hops carry the codes (half of bf16's bytes)";
  const double fp8_peak = fp8_peak_tflops(config, device);
  if (bf16_peak > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, " | MFU against the bf16 peak %.0f TFLOP/s; FP8 peak %s", bf16_peak,
                  fp8_peak > 0 ? (std::to_string(int(fp8_peak)) + " TFLOP/s (mfu_fp8_peak in metrics)").c_str()
                               : "unknown for this device");
    line += buf;
  }
  return line;
}

}  // namespace rt
