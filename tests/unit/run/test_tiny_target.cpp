// configs/tiny.yaml: its stated arithmetic holds, and a shortened run (one process, cp=1: the same math as
// the cp=2 job) already learns the long-range copy. The full job and its < 0.05 target are checked by the
// integration test (tests/integration/tiny_main.sh).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/config/config.h"
#include "framework/plan/mfu.h"
#include "framework/model/model.h"
#include "framework/run/trainer.h"

namespace rt {
namespace {

const std::string kTiny = std::string(RINGTRAIN_SOURCE_DIR) + "/configs/tiny.yaml";

TEST(TinyConfig, MatchesItsStatedArithmetic) {
  const Config c = load_config(kTiny, {}, /*world_size=*/2);
  EXPECT_EQ(c.parallel.cp, 2);
  EXPECT_EQ(resolved_layout(c), "zigzag");
  EXPECT_EQ(count_parameters(c.model), 102720);
  EXPECT_EQ(int64_t(c.train.batch_size) * c.data.seq_len, 1024);
  EXPECT_NEAR(flops_model(c).per_token(), 653184, 0.5);
  EXPECT_EQ(c.data.source, "copy");
}

TEST(TinyConfig, ShortRunLearnsTheLongRangeCopy) {
  const std::string run_dir =
      (std::filesystem::temp_directory_path() / ("rt_tiny_target_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(run_dir);
  const Config c = load_config(kTiny,
                               {"parallel.cp=1", "device=cpu", "train.steps=200", "train.eval_every=200", "log.every=50",
                                "train.run_dir=" + run_dir},
                               1);
  ASSERT_EQ(train_main(c), 0);
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  nlohmann::json last_eval;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("eval_loss_repeat_half")) last_eval = j;
  }
  ASSERT_FALSE(last_eval.is_null()) << "no eval record in " << run_dir << "/metrics.jsonl";
  const double first = last_eval["eval_loss_first_half"], repeat = last_eval["eval_loss_repeat_half"];
  const double uniform = std::log(double(c.model.vocab_size - 1));  // tokens are drawn from [0, vocab-1)
  EXPECT_NEAR(first, uniform, 0.15) << "the first half is random: its loss stays near log(31)";
  EXPECT_LT(repeat, 1.5) << "after 200 steps the repeat must be well below log(31) = " << uniform;
  std::filesystem::remove_all(run_dir);
}

}  // namespace
}  // namespace rt
