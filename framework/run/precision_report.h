// What train.precision and fp8.* mean for a run, said where a user looks (issue 44): the start-up line, and MFU
// against the FP8 peak beside the bf16 one (MFU itself stays against bf16). metrics.jsonl's step lines carry
// "precision" and "fp8_recipe" (framework/run/trainer.cpp).
#pragma once
#include <string>

#include "framework/config/config.h"
#include "kernels/tensor.h"

namespace rt {

// "precision: fp8 (fp8.recipe: tensorwise; E4M3 ...; current scaling: no scaling state in checkpoints) | MFU
// against the bf16 peak 989 TFLOP/s; FP8 peak 1979 TFLOP/s", or "precision: bf16 (...)".
std::string precision_line(const Config& config, Device device, double bf16_peak_tflops);
// The dense FP8 peak the MFU of an fp8 run is also shown against; 0 under bf16, on the CPU, or when unknown.
double fp8_peak_tflops(const Config& config, Device device);

}  // namespace rt
