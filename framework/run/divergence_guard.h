// The host side of the divergence guard (issue 17). On the device every step checks its loss and gradient
// norm: a non-finite one skips that step's update and is counted (AdamW::guard_losses, grad_clip_scale, adamw),
// so the host still waits only at logging points. There, and before every save, the host reads the count and
// the logged loss and asks this class what to do:
//   - non-finite steps, train.on_divergence=stop (the default): stop, exit 3, save nothing;
//   - non-finite steps, skip_step: go on; the log line counts the skips;
//   - precision fp8: an FP8 factor that was not finite (check_fp8), naming the layer and the tensor: as a
//     non-finite step (it would have poisoned the loss or the gradients);
//   - train.divergence_factor > 0 and a logged loss above factor x the running mean of the earlier logged
//     losses: stop (exit 3) with on_divergence=stop; with skip_step a warning (that update was applied: the
//     spike is seen only at a logging point).
// Every rank sees the same all-reduced numbers, so every rank decides the same without talking.
#pragma once
#include <cstdint>
#include <string>

#include "framework/config/config.h"

namespace rt {

struct GuardVerdict {
  bool stop = false;         // diverged: end the run with exit code 3, no save
  std::string message;       // the reason and what to try (stop), or a note for the log ("" = nothing)
};

class DivergenceGuard {
 public:
  DivergenceGuard(const TrainConfig& train, const OptimConfig& optim);
  // step: the step just checked; skipped_total: AdamW::skipped_steps(); loss, grad_norm: that step's values.
  GuardVerdict check(int64_t step, int64_t skipped_total, double loss, double grad_norm);
  // train.precision: fp8: bad_factors is Model::take_fp8_bad_factors() (the same on every rank): "" passes; else an
  // FP8 scale was not finite (an amax that overflowed, or a NaN in a tensor) in a step up to `step`: stop (exit 3)
  // naming the layers with on_divergence=stop, a warning with skip_step.
  GuardVerdict check_fp8(int64_t step, const std::string& bad_factors) const;
  int64_t skipped() const { return seen_skips_; }
  double running_mean() const { return mean_; }

 private:
  TrainConfig train_;
  OptimConfig optim_;
  int64_t seen_skips_ = 0;
  int64_t last_checked_ = 0;
  double mean_ = 0;
  int64_t losses_seen_ = 0;
};

}  // namespace rt
