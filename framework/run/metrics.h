// Per-step metrics (DESIGN.md "Metrics and output"): the console line rank 0 prints each step and the
// JSONL file (one object per line, flushed per line) holding the same fields.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/run/tensorboard.h"

namespace rt {

struct StepMetrics {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = NAN;
  bool no_targets = false;  // the step had no target: the line says so; the loss is NaN, written as null
  // The data source's loss groups (the copy task: first_half, repeat_half) and their mean losses; JSONL keys
  // loss_<name>. Empty for sources without groups.
  std::vector<std::pair<std::string, double>> group_losses;
  double lr = 0;
  double grad_norm = NAN;
  double tok_per_s = 0;
  double mfu = NAN;               // fraction of peak (0.41 = 41%); NaN when no peak is known
  double ms_per_step = 0;
  int64_t peak_mem_bytes = 0;
  double eta_s = NAN;
  std::optional<double> eval_loss;
  std::map<std::string, double> extra;  // further numeric fields for the JSONL (e.g. ring comm/compute ms)
  std::map<std::string, std::string> labels;  // text fields for the JSONL (e.g. precision: fp8, fp8_recipe)
};

// "step 12/300 | loss 2.3145 (first_half 4.10, repeat_half 0.52) | lr 3.0e-03 | gnorm 0.84 | 41.2K tok/s |
//  MFU 0.0% | 12.3 ms | mem 0.1 GiB | ETA 0:03:36" (the loss groups only when the source has them; "| eval 2.1000"
//  when set).
std::string format_step_line(const StepMetrics& m);
// One JSON object (no newline); NaN values are written as null.
std::string metrics_json(const StepMetrics& m);
// 41.2K, 3.1M, 812
std::string format_rate(double per_second);
// h:mm:ss; "--:--:--" when unknown (NaN or negative)
std::string format_eta(double seconds);

// Appends one JSON object per line to a file and flushes every line (a crash loses at most one line).
class MetricsWriter {
 public:
  // append=false truncates (a fresh run), true continues the file (a resumed run). Throws rt::Error if
  // the file cannot be opened.
  MetricsWriter(const std::string& path, bool append);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const StepMetrics& m);
  void write_json_line(const std::string& json_object);  // any other record (e.g. an eval result)
  const std::string& path() const { return path_; }
  // From now on every line written also goes to these TensorBoard event files (log.tensorboard), after the line.
  void attach_tensorboard(std::unique_ptr<TensorBoardWriter> events) { events_ = std::move(events); }
  const TensorBoardWriter* tensorboard() const { return events_.get(); }

 private:
  std::string path_;
  std::unique_ptr<TensorBoardWriter> events_;
  std::FILE* file_ = nullptr;
};

}  // namespace rt
