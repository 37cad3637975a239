// The per-step console line and the JSONL metrics writer.
#include "framework/run/metrics.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kernels/tensor.h"

namespace rt {
namespace {

std::string printf_string(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

std::string format_rate(double r) {
  if (!std::isfinite(r)) return "n/a";
  if (r >= 1e9) return printf_string("%.1fG", r / 1e9);
  if (r >= 1e6) return printf_string("%.1fM", r / 1e6);
  if (r >= 1e3) return printf_string("%.1fK", r / 1e3);
  return printf_string("%.0f", r);
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  const long long s = (long long)(seconds + 0.5);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string format_step_line(const StepMetrics& m) {
  std::string line = "step " + std::to_string(m.step) + "/" + std::to_string(m.total_steps);
  line += " | loss " + (m.no_targets ? std::string("n/a (no targets)") : printf_string("%.4f", m.loss));
  for (size_t i = 0; i < m.group_losses.size(); ++i)
    line += (i == 0 ? " (" : ", ") + m.group_losses[i].first + " " + printf_string("%.2f", m.group_losses[i].second) +
            (i + 1 == m.group_losses.size() ? ")" : "");
  line += " | lr " + printf_string("%.1e", m.lr);
  line += " | gnorm " + (std::isfinite(m.grad_norm) ? printf_string("%.2f", m.grad_norm) : std::string("n/a"));
  line += " | " + format_rate(m.tok_per_s) + " tok/s";
  line += " | MFU " + (std::isfinite(m.mfu) ? printf_string("%.1f%%", m.mfu * 100) : std::string("n/a"));
  line += " | " + printf_string("%.1f ms", m.ms_per_step);
  line += " | mem " + printf_string("%.1f GiB", double(m.peak_mem_bytes) / (1024.0 * 1024 * 1024));
  line += " | ETA " + format_eta(m.eta_s);
  if (m.eval_loss) line += " | eval " + printf_string("%.4f", *m.eval_loss);
  return line;
}

std::string metrics_json(const StepMetrics& m) {
  nlohmann::json j = nlohmann::json::object();
  j["step"] = m.step;
  j["total_steps"] = m.total_steps;
  j["loss"] = number_or_null(m.loss);
  for (const auto& [name, value] : m.group_losses) j["loss_" + name] = number_or_null(value);
  j["lr"] = number_or_null(m.lr);
  j["grad_norm"] = number_or_null(m.grad_norm);
  j["tok_per_s"] = number_or_null(m.tok_per_s);
  j["mfu"] = number_or_null(m.mfu);
  j["ms_per_step"] = number_or_null(m.ms_per_step);
  j["peak_mem_bytes"] = m.peak_mem_bytes;
  j["eta_s"] = number_or_null(m.eta_s);
  if (m.eval_loss) j["eval_loss"] = number_or_null(*m.eval_loss);
  for (const auto& [key, value] : m.extra) j[key] = number_or_null(value);
  for (const auto& [key, value] : m.labels) j[key] = value;
  return j.dump();
}

MetricsWriter::MetricsWriter(const std::string& path, bool append) : path_(path) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file_)
    throw Error("cannot open metrics file '" + path + "': " + std::strerror(errno) +
                " (check train.run_dir and log.metrics_file)");
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const StepMetrics& m) { write_json_line(metrics_json(m)); }

void MetricsWriter::write_json_line(const std::string& json_object) {
  if (std::fputs(json_object.c_str(), file_) < 0 || std::fputc('\n', file_) == EOF || std::fflush(file_) != 0)
    throw Error("writing metrics file '" + path_ + "' failed: " + std::strerror(errno) + " (is the disk full?)");
  if (events_) events_->write_json_scalars(json_object);
}

}  // namespace rt
