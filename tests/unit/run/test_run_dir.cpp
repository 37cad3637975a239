// The run directory (framework/run/run_dir.h, framework/run/resume_plan.h) without training: the lock refuses a second
// holder and names it; plan_run's choices (fresh, refused, overwrite, auto, continue, branch) and their reasons;
// metrics lines past the resumed step move to a side file; rotation stays inside a lineage and keeps the
// checkpoint resumed from; resume refuses model/data changes naming each field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "framework/checkpoint/checkpoint.h"
#include "framework/config/config.h"
#include "framework/run/resume_plan.h"
#include "framework/run/run_dir.h"
#include "framework/base/run_errors.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rt_run_dir_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string run() const { return (dir_ / "run").string(); }
  Config config(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> o = {"train.run_dir=" + run(), "device=cpu"};
    o.insert(o.end(), extra.begin(), extra.end());
    return parse_config_text("{}", o, 0, "test");
  }
  // A checkpoint of `lineage` at `step` whose state records `config`.
  std::string save(const std::string& lineage, int64_t step, const Config& c, int keep_last = 5,
                   const std::vector<std::string>& keep = {}) {
    TrainState st;
    st.step = step, st.lineage = lineage, st.config = config_as_map(c), st.config_hash = model_config_hash(c);
    const std::vector<HostTensor> w = {{"w", {2}, {1.f, float(step)}}};
    return save_checkpoint(lineage_dir(run(), lineage), w, w, st, c.model, keep_last, {}, keep);
  }
  fs::path dir_;
};

TEST_F(RunDirTest, LockRefusesASecondHolderAndNamesTheFirst) {
  auto first = std::make_unique<RunDirLock>(run());
  try {
    RunDirLock second(run());
    FAIL() << "a second lock was granted";
  } catch (const RunError& e) {
    EXPECT_EQ(e.code(), kExitUsage);
    const std::string m = e.what();
    EXPECT_NE(m.find("is in use by another run (pid " + std::to_string(::getpid()) + " on host "), std::string::npos)
        << m;
  }
  first.reset();
  EXPECT_NO_THROW(RunDirLock again(run()));
}

TEST_F(RunDirTest, PlanFreshRefusedOverwriteAutoContinueBranch) {
  Config c = config();
  RunPlan p = plan_run(c);
  EXPECT_TRUE(p.resume_from.empty());
  EXPECT_EQ(p.lineage, "main");
  fs::create_directories(run());
  write_run_record(run(), {"main", ""});
  const std::string s10 = save("main", 10, c), s20 = save("main", 20, c);

  try {
    plan_run(c);
    FAIL() << "a fresh run into a used run_dir was planned";
  } catch (const RunError& e) {
    EXPECT_NE(std::string(e.what()).find("already holds 2 checkpoint(s)"), std::string::npos) << e.what();
  }
  p = plan_run(config({"train.overwrite=true"}));
  EXPECT_EQ(p.wipe.size(), 2u);

  p = plan_run(config({"checkpoint.resume=auto"}));
  EXPECT_EQ(p.resume_from, s20);
  EXPECT_EQ(p.lineage, "main");
  EXPECT_FALSE(p.write_record);
  EXPECT_NE(p.why.find("the newest checkpoint of lineage 'main'"), std::string::npos) << p.why;

  p = plan_run(config({"checkpoint.resume=" + s20}));
  EXPECT_EQ(p.lineage, "main");
  EXPECT_NE(p.why.find("continuing it"), std::string::npos) << p.why;

  p = plan_run(config({"checkpoint.resume=" + s10}));
  EXPECT_EQ(p.lineage, "main.b10");
  EXPECT_EQ(p.parent, s10);
  EXPECT_TRUE(p.write_record);
  EXPECT_NE(p.why.find("a branch, new lineage 'main.b10'"), std::string::npos) << p.why;
  // The branch becomes current; auto before its first save goes back to its parent, after it to its newest.
  write_run_record(run(), {p.lineage, p.parent});
  p = plan_run(config({"checkpoint.resume=auto"}));
  EXPECT_EQ(p.resume_from, s10);
  EXPECT_NE(p.why.find("has no checkpoint yet"), std::string::npos) << p.why;
  const std::string b15 = save("main.b10", 15, c);
  p = plan_run(config({"checkpoint.resume=auto"}));
  EXPECT_EQ(p.resume_from, b15) << "auto must take the current lineage's newest, not main/step_20";
  // A second branch from the same step gets its own name.
  fs::create_directories(lineage_dir(run(), "main.b10"));
  EXPECT_EQ(branch_lineage_name(run(), "main", 10), "main.b10-2");
}

TEST_F(RunDirTest, RotationStaysInTheLineageAndKeepsTheResumedFrom) {
  Config c = config();
  const std::string m10 = save("main", 10, c), m20 = save("main", 20, c);
  for (int64_t s : {30, 40, 50}) save("main.b10", s, c, /*keep_last=*/1, {m10});
  EXPECT_EQ(list_checkpoints(lineage_dir(run(), "main")), (std::vector<std::string>{m10, m20}));
  EXPECT_EQ(list_checkpoints(lineage_dir(run(), "main.b10")).size(), 1u);
  // Within one lineage, keep_last 1 still keeps the one resumed from.
  save("main", 30, c, /*keep_last=*/1, {m10});
  const auto left = list_checkpoints(lineage_dir(run(), "main"));
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], m10);
}

TEST_F(RunDirTest, MetricsPastTheResumedStepMoveToASideFile) {
  const std::string path = (dir_ / "metrics.jsonl").string();
  {
    std::ofstream out(path);
    for (int s = 1; s <= 15; ++s) out << "{\"step\":" << s << ",\"loss\":1.0}\n";
    out << "{\"step\":10,\"eval_loss\":2.0}\n";
  }
  const std::string side = move_metrics_after(path, 10);
  EXPECT_EQ(side, path + ".after-step10.1");
  auto lines = [](const std::string& p) {
    std::ifstream in(p);
    std::string l;
    int n = 0;
    while (std::getline(in, l)) ++n;
    return n;
  };
  EXPECT_EQ(lines(path), 11);  // steps 1..10 and the eval line of step 10
  EXPECT_EQ(lines(side), 5);   // steps 11..15, in order
  EXPECT_EQ(move_metrics_after(path, 10), "") << "nothing left to move";
  EXPECT_EQ(move_metrics_aside(path), path + ".previous.1");
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(RunDirTest, ResumeRefusesModelAndDataChangesAndPrintsTheAllowedOnes) {
  const Config c = config({"model.n_layer=2", "data.seq_len=64", "train.steps=20"});
  const std::string ck = save("main", 10, c);
  Config changed = config({"model.n_layer=3", "data.seq_len=128", "train.steps=40", "optim.lr=0.001"});
  try {
    reconcile_resume_config(changed, ck, 0);
    FAIL() << "no error";
  } catch (const RunError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("model.n_layer: the config sets 3, the checkpoint has 2"), std::string::npos) << m;
  }
  Config data_changed = config({"data.seq_len=128", "train.steps=40", "optim.lr=0.001"});
  try {
    reconcile_resume_config(data_changed, ck, 0);
    FAIL() << "no error";
  } catch (const RunError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("data.seq_len: 64 -> 128"), std::string::npos) << m;
    EXPECT_NE(m.find("Changes allowed on resume: train.steps, optim.*"), std::string::npos) << m;
  }
  Config ok = config({"train.steps=40", "optim.lr=0.001", "data.seq_len=64"});
  const auto changes = reconcile_resume_config(ok, ck, 0);
  EXPECT_NE(std::find(changes.begin(), changes.end(), "train.steps: 20 -> 40"), changes.end());
  EXPECT_NE(std::find(changes.begin(), changes.end(), "optim.lr: 0.003 -> 0.001"), changes.end());
  EXPECT_EQ(ok.model.n_layer, 2) << "an unset model field comes from the checkpoint";
}

}  // namespace
}  // namespace rt
