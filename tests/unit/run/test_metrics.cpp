// Metrics: the console line format and the JSONL writer (one parseable object per line, NaN as null).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "framework/run/metrics.h"
#include "kernels/tensor.h"
#include "tests/unit/test_util.h"

namespace fs = std::filesystem;

namespace {

rt::StepMetrics example() {
  rt::StepMetrics m;
  m.step = 12;
  m.total_steps = 300;
  m.loss = 2.31454;
  m.group_losses = {{"first_half", 4.1}, {"repeat_half", 0.52}};
  m.lr = 3e-3;
  m.grad_norm = 0.84;
  m.tok_per_s = 41230;
  m.mfu = 0.0;
  m.ms_per_step = 12.34;
  m.peak_mem_bytes = int64_t(0.1 * 1024 * 1024 * 1024);
  m.eta_s = 216;
  return m;
}

TEST(Metrics, ConsoleLine) {
  EXPECT_EQ(rt::format_step_line(example()),
            "step 12/300 | loss 2.3145 (first_half 4.10, repeat_half 0.52) | lr 3.0e-03 | gnorm 0.84 | 41.2K tok/s | MFU 0.0% | "
            "12.3 ms | mem 0.1 GiB | ETA 0:03:36");
  rt::StepMetrics m = example();
  m.group_losses.clear();
  m.mfu = NAN;
  m.eval_loss = 1.5;
  m.tok_per_s = 3.2e6;
  m.eta_s = 3 * 3600 + 61;
  EXPECT_EQ(rt::format_step_line(m),
            "step 12/300 | loss 2.3145 | lr 3.0e-03 | gnorm 0.84 | 3.2M tok/s | MFU n/a | 12.3 ms | mem 0.1 GiB | "
            "ETA 3:01:01 | eval 1.5000");
  EXPECT_EQ(rt::format_eta(NAN), "--:--:--");
}

TEST(Metrics, JsonlWriterFlushesEachLine) {
  const std::string tmpl = rt::test::make_temp_dir("rt_test_metrics").string();
  const std::string path = tmpl + "/metrics.jsonl";
  {
    rt::MetricsWriter w(path, /*append=*/false);
    w.write(example());
    rt::StepMetrics m = example();
    m.step = 13;
    m.group_losses = {{"first_half", NAN}};
    m.eval_loss = 2.0;
    m.extra["ring_comm_ms"] = 1.25;
    w.write(m);
    // Readable before the writer closes: every line is flushed.
    std::ifstream in(path);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) ++lines;
    EXPECT_EQ(lines, 2);
  }
  { rt::MetricsWriter(path, /*append=*/true).write_json_line(R"({"step": 14, "eval_loss": 1.0})"); }
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["step"], 12);
  EXPECT_NEAR(rows[0]["loss"].get<double>(), 2.31454, 1e-12);
  EXPECT_NEAR(rows[0]["tok_per_s"].get<double>(), 41230, 1e-9);
  EXPECT_FALSE(rows[0].contains("eval_loss"));
  EXPECT_NEAR(rows[0]["loss_repeat_half"].get<double>(), 0.52, 1e-12);
  EXPECT_TRUE(rows[1]["loss_first_half"].is_null());
  EXPECT_FALSE(rows[1].contains("loss_repeat_half"));
  EXPECT_EQ(rows[1]["eval_loss"], 2.0);
  EXPECT_EQ(rows[1]["ring_comm_ms"], 1.25);
  EXPECT_EQ(rows[2]["step"], 14);
  // A fresh (non-append) writer truncates.
  { rt::MetricsWriter(path, /*append=*/false); }
  EXPECT_EQ(fs::file_size(path), 0u);
  fs::remove_all(tmpl);
  EXPECT_THROW(rt::MetricsWriter("/nonexistent_dir_rt/m.jsonl", false), rt::Error);
}

}  // namespace
