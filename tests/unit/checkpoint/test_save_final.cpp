// checkpoint.save_final: a run saves at its last step unless told not to (benchmarks and sweeps).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"
#include "framework/run/trainer.h"

namespace rt {
namespace {

std::string run_tiny(bool save_final) {
  const std::string run_dir = (std::filesystem::temp_directory_path() /
                               ("rt_save_final_" + std::to_string(::getpid()) + (save_final ? "_on" : "_off")))
                                  .string();
  std::filesystem::remove_all(run_dir);
  const Config c = load_config(std::string(RINGTRAIN_SOURCE_DIR) + "/configs/tiny.yaml",
                               {"parallel.cp=1", "device=cpu", "train.steps=2", "optim.warmup_steps=1",
                                "train.eval_every=0", "train.run_dir=" + run_dir,
                                std::string("checkpoint.save_final=") + (save_final ? "true" : "false")},
                               1);
  EXPECT_EQ(train_main(c), 0);
  return run_dir;
}

TEST(SaveFinal, OnByDefaultOffOnRequest) {
  const std::string on = run_tiny(true), off = run_tiny(false);
  EXPECT_NE(latest_checkpoint(on + "/checkpoints/main"), "") << "the last step must be saved by default";
  EXPECT_EQ(latest_checkpoint(off + "/checkpoints/main"), "") << "checkpoint.save_final=false must skip the final save";
  EXPECT_TRUE(std::filesystem::exists(off + "/metrics.jsonl"));
  std::filesystem::remove_all(on);
  std::filesystem::remove_all(off);
}

}  // namespace
}  // namespace rt
