// Run directories owned by one run, through the real binary (issue 17; each case failed on the code before it):
//   - a fresh run into a run_dir that holds checkpoints is refused (exit 2) and touches nothing; with
//     train.overwrite=true it starts over, moving the old metrics aside;
//   - branching: resuming an older checkpoint starts lineage main.b<step>; rotation (keep_last) never deletes the
//     other lineage's checkpoints nor the one resumed from; resume: auto then continues the branch and says why;
//     metrics.jsonl holds each step once, the superseded lines moved to a side file;
//   - two runs into one run_dir: the second is refused, naming the holder's pid and host;
//   - a rank killed with SIGKILL: the job ends within seconds, launch/train.sh names the rank last; after
//     resume: auto each step is logged once.
#include "framework/checkpoint/checkpoint.h"
#include "tests/mpi/run_job_util.h"

namespace {

using rt::test::names_in;
using rt::test::ProcessResult;
using rt::test::step_counts;

namespace fs = std::filesystem;

class RunDirs : public rt::test::RunJobTest {};

void expect_each_step_once(const fs::path& metrics, int first, int last) {
  const std::map<int, int> counts = step_counts(metrics);
  for (int s = first; s <= last; ++s) EXPECT_EQ(counts.count(s) ? counts.at(s) : 0, 1) << "step " << s;
  EXPECT_EQ(counts.size(), size_t(last - first + 1));
}

TEST_F(RunDirs, FreshRunIntoAUsedRunDirIsRefusedUnlessOverwrite) {
  const fs::path run = dir_ / "run";
  const std::string cfg = config("a.yaml", run.string());
  ProcessResult r = bash("$TRAIN " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = bash("$TRAIN " + cfg + " --set train.steps=30");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("already holds 2 checkpoint(s) of an earlier run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--set checkpoint.resume=auto"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--set train.overwrite=true"), std::string::npos) << r.output;
  EXPECT_EQ(names_in(run / "checkpoints" / "main"), (std::vector<std::string>{"step_10", "step_20"}));
  expect_each_step_once(run / "metrics.jsonl", 1, 20);

  r = bash("$TRAIN " + cfg + " --set train.steps=12 --set train.overwrite=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(names_in(run / "checkpoints" / "main"), (std::vector<std::string>{"step_10", "step_12"}));
  expect_each_step_once(run / "metrics.jsonl", 1, 12);
  expect_each_step_once(run / "metrics.jsonl.previous.1", 1, 20);  // the old run's metrics, moved aside
}

TEST_F(RunDirs, BranchingResumeWithRotationKeepsEveryLineage) {
  const fs::path run = dir_ / "run";
  const std::string cfg = config("b.yaml", run.string());
  ProcessResult r = bash("$TRAIN " + cfg + " --set train.steps=30");  // main: step_20, step_30 (keep_last 2)
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string from = (run / "checkpoints" / "main" / "step_20").string();
  r = bash("$TRAIN " + cfg + " --set train.steps=50 --set checkpoint.resume=" + from);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("a branch, new lineage 'main.b20'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resume: changed (allowed) train.steps: 30 -> 50"), std::string::npos) << r.output;
  EXPECT_EQ(names_in(run / "checkpoints" / "main"), (std::vector<std::string>{"step_20", "step_30"}))
      << "the branch's saves must not replace or rotate away the other lineage\n" << r.output;
  EXPECT_EQ(names_in(run / "checkpoints" / "main.b20"), (std::vector<std::string>{"step_40", "step_50"}));
  // Steps 21..30 of the old lineage moved aside; the file holds the branch's history, each step once.
  expect_each_step_once(run / "metrics.jsonl", 1, 50);
  expect_each_step_once(run / "metrics.jsonl.after-step20.1", 21, 30);

  // auto: the newest of the current lineage (the branch), not the newest checkpoint anywhere.
  r = bash("$TRAIN " + cfg + " --set train.steps=60 --set checkpoint.resume=auto --set checkpoint.keep_last=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resume: auto -> " + (run / "checkpoints/main.b20/step_50").string() +
                          ": the newest checkpoint of lineage 'main.b20'"),
            std::string::npos)
      << r.output;
  // keep_last 1 keeps the new step_60 and the checkpoint this run resumed from.
  EXPECT_EQ(names_in(run / "checkpoints" / "main.b20"), (std::vector<std::string>{"step_50", "step_60"})) << r.output;
  EXPECT_EQ(names_in(run / "checkpoints" / "main"), (std::vector<std::string>{"step_20", "step_30"}));
  expect_each_step_once(run / "metrics.jsonl", 1, 60);
}

TEST_F(RunDirs, TwoRunsIntoOneRunDirTheSecondIsRefused) {
  const fs::path run = dir_ / "run";
  const std::string cfg = config("c.yaml", run.string());
  const std::string metrics = (run / "metrics.jsonl").string();
  // One rank each: the first run trains flat out for the whole test, and with its two ranks (and their loaders'
  // threads) on CI's two cores the second job's mpirun could starve before it started a rank (seen as a hang
  // past the script's limit in about one run in four under load). The lock does not depend on the rank count.
  const ProcessResult r = bash(
      "$TRAIN " + cfg + " --set parallel.cp=1 --set train.steps=1000000 --set checkpoint.every=0 > $D/first.log 2>&1 "
      "&\np=$!\n"
      "for i in $(seq 600); do [ -s " + metrics + " ] && break; sleep 0.1; done\n"
      "$TRAIN " + cfg + " --set parallel.cp=1 --set train.overwrite=true; echo second_rc=$?\n"
      "kill -TERM $p; wait $p; echo first_rc=$?\ncat " + (run / ".lock").string());
  EXPECT_NE(r.output.find("second_rc=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is in use by another run (pid "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("first_rc=143"), std::string::npos) << "the first run must be untouched\n" << r.output;
  // Its metrics are one run's, every line whole.
  std::ifstream in(metrics);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    EXPECT_NO_THROW((void)nlohmann::json::parse(line)) << line;
    ++lines;
  }
  EXPECT_GT(lines, 0);
  const std::map<int, int> counts = step_counts(metrics);
  for (const auto& [step, n] : counts) EXPECT_EQ(n, 1) << "step " << step;
}

TEST_F(RunDirs, KilledRankEndsTheJobAndResumeLogsEachStepOnce) {
  const fs::path run = dir_ / "run";
  const std::string cfg = config("d.yaml", run.string());
  const std::string metrics = (run / "metrics.jsonl").string();
  ProcessResult r;
  std::string newest;
  int64_t resumed = 0, logged = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    r = bash(
        "$TRAIN " + cfg + " --set train.steps=1000000 --set checkpoint.every=50 > $D/kill.log 2>&1 &\np=$!\n"
        // The victim first (once the job logs), then kill it well past a checkpoint (one line per step), so
        // that steps past it are logged however far the job runs on between the poll and the kill.
        "for i in $(seq 3000); do [ -s " + metrics + " ] && break; sleep 0.02; done\n"
        "m=$(child_pids $p mpirun)\n"
        "holder=$(sed -n 's/^pid \\([0-9]*\\) .*/\\1/p' " + (run / ".lock").string() + ")\n"
        "victim=$(child_pids $m | grep -v \"^$holder\\$\" | head -n 1)\n"
        "for i in $(seq 3000); do n=$(cat " + metrics + " 2>/dev/null | wc -l); "
        "[ $n -ge 53 ] && [ $((n % 50)) -ge 3 ] && [ $((n % 50)) -le 30 ] && break; sleep 0.02; done\n"
        "start=$(date +%s)\nkill -9 $victim\nwait $p\necho rc=$?\necho seconds=$(( $(date +%s) - start ))\n"
        "cat $D/kill.log", 90);
    EXPECT_EQ(r.output.find("rc=0"), std::string::npos) << r.output;
    // launch/train.sh names the dead rank again, last.
    EXPECT_NE(r.output.find("train.sh: the job failed (exit 137): process rank 1 with PID"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("rc="), std::string::npos) << r.output;
    const size_t at = r.output.find("seconds=");
    ASSERT_NE(at, std::string::npos) << r.output;
    EXPECT_LT(std::stoi(r.output.substr(at + 8)), 30) << r.output;
    newest = rt::latest_checkpoint((run / "checkpoints" / "main").string());
    ASSERT_FALSE(newest.empty()) << r.output;
    resumed = rt::read_checkpoint_state(newest).step;
    logged = int64_t(step_counts(metrics).rbegin()->first);
    if (logged > resumed) break;  // else the kill landed right at a checkpoint (a race with the poll): again
    fs::remove_all(run);
  }
  ASSERT_GT(logged, resumed) << "the kill should leave steps past the last checkpoint in the metrics\n" << r.output;

  r = bash("$TRAIN " + cfg + " --set train.steps=" + std::to_string(logged + 5) + " --set checkpoint.resume=auto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_each_step_once(metrics, 1, int(logged + 5));
  expect_each_step_once(run / ("metrics.jsonl.after-step" + std::to_string(resumed) + ".1"), int(resumed + 1),
                        int(logged));
}

}  // namespace
