#include "framework/run/divergence_guard.h"

#include <cmath>
#include <cstdio>

namespace rt {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

DivergenceGuard::DivergenceGuard(const TrainConfig& train, const OptimConfig& optim) : train_(train), optim_(optim) {}

GuardVerdict DivergenceGuard::check(int64_t step, int64_t skipped_total, double loss, double grad_norm) {
  GuardVerdict v;
  const int64_t first = last_checked_ + 1;
  last_checked_ = step;
  const int64_t fresh = skipped_total - seen_skips_;
  seen_skips_ = skipped_total;
  const std::string tries = "Try a lower optim.lr (now " + number(optim_.lr) + "), a longer optim.warmup_steps (now " +
                            std::to_string(optim_.warmup_steps) + "), or optim.grad_clip (now " +
                            number(optim_.grad_clip) + "); resume from the last checkpoint with "
                            "--set checkpoint.resume=auto";
  if (fresh > 0) {
    const std::string where = first == step ? "at step " + std::to_string(step)
                                            : "in " + std::to_string(fresh) + " of steps " + std::to_string(first) +
                                                  ".." + std::to_string(step);
    const std::string what = "divergence " + where + ": the loss or gradient norm was not finite (step " +
                             std::to_string(step) + ": loss " + number(loss) + ", grad norm " + number(grad_norm) +
                             "); the update of each such step was skipped on the device";
    if (train_.on_divergence == "stop") {
      v.stop = true;
      v.message = what + ", and the run stops without saving (the last checkpoint is the last good state). " +
                  tries + ". train.on_divergence=skip_step skips such steps and goes on";
    } else {
      v.message = what + " (train.on_divergence=skip_step: " + std::to_string(seen_skips_) + " skipped so far)";
    }
    return v;
  }
  if (!std::isfinite(loss)) return v;
  if (train_.divergence_factor > 0 && losses_seen_ > 0 && loss > train_.divergence_factor * mean_) {
    const std::string what = "divergence at step " + std::to_string(step) + ": loss " + number(loss) + " exceeds " +
                             "train.divergence_factor " + number(train_.divergence_factor) + " x the running mean " +
                             number(mean_) + " of the earlier logged losses";
    if (train_.on_divergence == "stop") {
      v.stop = true;
      v.message = what + "; the run stops without saving (the last checkpoint is the last good state). " + tries +
                  ", or raise train.divergence_factor (0 = off)";
    } else {
      v.message = what + " (train.on_divergence=skip_step: this update was already applied; going on)";
    }
    return v;
  }
  // Running mean of the logged losses: the plain mean of the first few, then an exponential one (weight 0.1).
  ++losses_seen_;
  const double w = losses_seen_ < 10 ? 1.0 / double(losses_seen_) : 0.1;
  mean_ += w * (loss - mean_);
  return v;
}

GuardVerdict DivergenceGuard::check_fp8(int64_t step, const std::string& bad_factors) const {
  GuardVerdict v;
  if (bad_factors.empty()) return v;
  const std::string what = "divergence by step " + std::to_string(step) + ": an FP8 scale was not finite (" +
                           bad_factors + ")";
  const std::string tries = "A NaN or an overflowing amax in a block's GEMM operand poisons its output: try a lower "
                            "optim.lr (now " + number(optim_.lr) + ") or optim.grad_clip (now " +
                            number(optim_.grad_clip) + "), fp8.bf16_first_last: true if it is the first or the last "
                            "block, or train.precision: bf16; resume from the last checkpoint with "
                            "--set checkpoint.resume=auto";
  if (train_.on_divergence == "stop") {
    v.stop = true;
    v.message = what + "; the run stops without saving (the last checkpoint is the last good state). " + tries;
  } else {
    v.message = what + " (train.on_divergence=skip_step: going on)";
  }
  return v;
}

}  // namespace rt
