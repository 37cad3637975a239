// Resume is bitwise: 20 straight steps == 10 steps, save, resume from that checkpoint, 10 more steps (every
// logged loss and every final weight identical). A SIGTERM mid-run saves a checkpoint and returns 0, and
// checkpoint.resume=auto finishes the run with the same weights as the uninterrupted one (the stopped run returns
// 128 + SIGTERM).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"
#include "framework/run/trainer.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

Config resume_config(const std::string& run_dir, const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {
      "model.n_layer=2", "model.d_model=32", "model.n_head=4", "model.n_kv_head=2", "model.vocab_size=16",
      "model.mlp=swiglu", "model.d_ff=64", "data.source=copy", "data.seq_len=32", "train.batch_size=4",
      "train.steps=20", "train.eval_every=0", "optim.lr=3e-3", "optim.warmup_steps=5", "optim.weight_decay=0.1",
      "checkpoint.every=0", "checkpoint.keep_last=5", "log.every=1", "device=cpu", "train.run_dir=" + run_dir};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return parse_config_text("{}", overrides, 1, "test_resume");
}

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("rt_resume_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir.string();
}

// step -> loss from run_dir/metrics.jsonl (step lines only).
std::map<int64_t, double> logged_losses(const std::string& run_dir) {
  std::map<int64_t, double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss") && j["loss"].is_number()) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

std::vector<HostTensor> final_weights(const std::string& run_dir) {
  return read_safetensors(run_dir + "/checkpoints/main/step_20/model.safetensors", nullptr);
}

void expect_same_weights(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : b) by_name[t.name] = &t;
  for (const HostTensor& t : a) {
    ASSERT_TRUE(by_name.count(t.name)) << t.name;
    EXPECT_TRUE(t.values == by_name[t.name]->values) << t.name << " differs";
  }
}

TEST(Resume, TenPlusTenStepsEqualTwentyBitwise) {
  const std::string straight = fresh_dir("straight"), first = fresh_dir("first"), second = fresh_dir("second");
  ASSERT_EQ(train_main(resume_config(straight, {})), 0);
  // Saves at step 10 (and 20); the second run resumes from step 10 in a new run directory.
  ASSERT_EQ(train_main(resume_config(first, {"checkpoint.every=10"})), 0);
  ASSERT_TRUE(fs::is_directory(first + "/checkpoints/main/step_10"));
  ASSERT_EQ(train_main(resume_config(second, {"checkpoint.resume=" + first + "/checkpoints/main/step_10"})), 0);

  const auto a = logged_losses(straight), b = logged_losses(second);
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 10u);  // steps 11..20 only
  for (const auto& [step, loss] : b) {
    ASSERT_TRUE(a.count(step)) << step;
    EXPECT_EQ(loss, a.at(step)) << "step " << step;  // bitwise
  }
  EXPECT_LT(a.at(20), a.at(1));  // and it trained
  expect_same_weights(final_weights(straight), final_weights(second));
  for (const auto& d : {straight, first, second}) fs::remove_all(d);
}

TEST(Resume, SigtermSavesAndAutoResumeFinishesTheSameRun) {
  const std::string straight = fresh_dir("sig_straight"), run = fresh_dir("sig_run");
  ASSERT_EQ(train_main(resume_config(straight, {})), 0);

  // An early signal must not kill the test process: ignore SIGTERM until the trainer installs its handler.
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGTERM, &ignore, &previous);
  std::atomic<bool> done{false};
  std::thread signaller([&] {
    while (!done.load()) {
      ::kill(::getpid(), SIGTERM);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const int rc = train_main(resume_config(run, {}));
  done = true;
  signaller.join();
  sigaction(SIGTERM, &previous, nullptr);
  ASSERT_EQ(rc, 128 + SIGTERM) << "a run stopped by a signal after its save returns 128 + the signal";
  const std::string stopped = latest_checkpoint(run + "/checkpoints/main");
  ASSERT_FALSE(stopped.empty()) << "no checkpoint saved on SIGTERM";
  EXPECT_NE(fs::path(stopped).filename(), "step_20") << "the signal did not stop the run early";

  ASSERT_EQ(train_main(resume_config(run, {"checkpoint.resume=auto"})), 0);
  expect_same_weights(final_weights(straight), final_weights(run));
  const auto a = logged_losses(straight), b = logged_losses(run);
  for (const auto& [step, loss] : b) EXPECT_EQ(loss, a.at(step)) << "step " << step;
  fs::remove_all(straight);
  fs::remove_all(run);
}

}  // namespace
}  // namespace rt
