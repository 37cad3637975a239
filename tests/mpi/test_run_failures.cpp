// Runs that go wrong, through the real binary (issue 17; each case failed on the code before it):
//   - divergence: exit 3, no checkpoint with a non-finite value, the good checkpoints kept; skip_step goes on;
//   - a SIGTERM to launch/train.sh while a slow save runs (RINGTRAIN_TEST_SAVE_DELAY_S): a complete checkpoint,
//     exit 143; `kill -USR1 <mpirun pid>` the same with exit 138;
//   - eval with a model section that disagrees with the checkpoint: exit 2 naming each field with both values;
//     eval with no model section and no optimizer.safetensors, on one process: the same loss as on the grid;
//   - a directory or an empty file as the config, a run_dir under /proc: exit 2 and a clear message;
//   - one rank stopped (SIGSTOP): exit 4 within seconds, naming the absent rank with its host and pid;
//   - a config error on 2 ranks: printed once by the job (and once more by train.sh, last), no MPI_ABORT banner.
#include <cmath>
#include <regex>

#include "framework/checkpoint/checkpoint.h"
#include "tests/mpi/run_job_util.h"

namespace {

using rt::test::count_of;
using rt::test::names_in;
using rt::test::ProcessResult;
namespace fs = std::filesystem;

class RunFailures : public rt::test::RunJobTest {};

int exit_code_in(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("rc=([0-9]+)"))) return -1;
  return std::stoi(m[1]);
}

void expect_all_finite(const std::string& checkpoint) {
  const rt::LoadedCheckpoint c = rt::load_checkpoint(checkpoint);
  for (const auto* group : {&c.model, &c.optimizer})
    for (const rt::HostTensor& t : *group)
      for (float v : t.values) ASSERT_TRUE(std::isfinite(v)) << checkpoint << ": " << t.name << " holds " << v;
}

TEST_F(RunFailures, DivergenceStopsWithExit3AndNeverSavesOrRotatesAwayAGoodState) {
  // The case: lr 1e4 from the first step, a save every 20 steps. Stops at once, saves nothing.
  const fs::path run = dir_ / "div";
  const std::string cfg = config("div.yaml", run.string());
  ProcessResult r = bash("$TRAIN " + cfg + " --set optim.lr=1e4 --set optim.min_lr=1e3 --set optim.warmup_steps=0 "
                         "--set checkpoint.every=20 --set train.steps=60");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("divergence at step [0-9]+: the loss or gradient norm was not "
                                                    "finite")))
      << r.output;
  EXPECT_NE(r.output.find("Try a lower optim.lr (now 10000)"), std::string::npos) << r.output;
  EXPECT_TRUE(names_in(run / "checkpoints" / "main").empty()) << "a diverged state was saved";

  // skip_step: the bad steps are skipped on the device and counted; whatever is saved is finite.
  const fs::path skip = dir_ / "skip";
  r = bash("$TRAIN " + config("skip.yaml", skip.string()) + " --set optim.lr=1e4 --set optim.min_lr=1e3 "
           "--set optim.warmup_steps=0 --set train.on_divergence=skip_step");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| skipped "), std::string::npos) << "the log must count the skips\n" << r.output;
  ASSERT_EQ(names_in(skip / "checkpoints" / "main"), (std::vector<std::string>{"step_10", "step_20"})) << r.output;
  for (const auto& n : names_in(skip / "checkpoints" / "main")) expect_all_finite((skip / "checkpoints/main" / n).string());

  // A good run, then a resume that spikes (finite, so only train.divergence_factor sees it) with a save every
  // 5 steps and keep_last 2: stops with exit 3 before its first save, and the good checkpoints are still there.
  // (The spike shows in the loss of the step after the bad update, so a save in between would hold it.)
  const fs::path good = dir_ / "good";
  const std::string good_cfg = config("good.yaml", good.string());
  r = bash("$TRAIN " + good_cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = bash("$TRAIN " + good_cfg + " --set checkpoint.resume=auto --set train.steps=40 --set optim.lr=1e4 "
           "--set optim.min_lr=1e3 --set checkpoint.every=5 --set train.divergence_factor=3");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("exceeds train.divergence_factor 3"), std::string::npos) << r.output;
  EXPECT_EQ(names_in(good / "checkpoints" / "main"), (std::vector<std::string>{"step_10", "step_20"})) << r.output;
  for (const auto& n : names_in(good / "checkpoints" / "main")) expect_all_finite((good / "checkpoints/main" / n).string());
}

TEST_F(RunFailures, SignalToTheLauncherDuringASlowSaveEndsWithACompleteCheckpoint) {
  const fs::path run = dir_ / "sig";
  const std::string cfg = config("sig.yaml", run.string());
  const std::string wait_for_steps =
      "for i in $(seq 600); do [ -s " + (run / "metrics.jsonl").string() + " ] && [ $(wc -l < " +
      (run / "metrics.jsonl").string() + ") -ge 5 ] && break; sleep 0.1; done\n";
  // A save that takes 3 s: Open MPI alone would SIGKILL the ranks 1 s after forwarding SIGTERM.
  ProcessResult r = bash("RINGTRAIN_TEST_SAVE_DELAY_S=3 $TRAIN " + cfg +
                         " --set train.steps=1000000 --set checkpoint.every=0 > $D/sig.log 2>&1 &\np=$!\n" +
                         wait_for_steps + "kill -TERM $p\nwait $p\necho rc=$?\ncat $D/sig.log");
  EXPECT_EQ(exit_code_in(r.output), 143) << r.output;
  EXPECT_NE(r.output.find("stopped on signal 15 after a complete save"), std::string::npos) << r.output;
  std::vector<std::string> kept = names_in(run / "checkpoints" / "main");
  ASSERT_EQ(kept.size(), 1u) << r.output;  // no .tmp_step_* left behind
  EXPECT_NO_THROW(rt::load_checkpoint((run / "checkpoints" / "main" / kept[0]).string())) << r.output;

  // The README recipe: kill -USR1 <mpirun pid>.
  fs::remove_all(run);
  r = bash("RINGTRAIN_TEST_SAVE_DELAY_S=2 $MPIRUN -np 2 --oversubscribe $BIN train " + cfg +
           " --set train.steps=1000000 --set checkpoint.every=0 > $D/usr1.log 2>&1 &\np=$!\n" + wait_for_steps +
           "kill -USR1 $p\nwait $p\necho rc=$?\ncat $D/usr1.log");
  EXPECT_EQ(exit_code_in(r.output), 138) << r.output;
  kept = names_in(run / "checkpoints" / "main");
  ASSERT_EQ(kept.size(), 1u) << r.output;
  EXPECT_NO_THROW(rt::load_checkpoint((run / "checkpoints" / "main" / kept[0]).string())) << r.output;
}

TEST_F(RunFailures, EvalTakesTheModelFromTheCheckpoint) {
  const fs::path run = dir_ / "ev";
  const std::string cfg = config("ev.yaml", run.string());
  ProcessResult r = bash("$TRAIN " + cfg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ckpt = (run / "checkpoints" / "main" / "step_20").string();
  auto loss_of = [](const std::string& out) {
    std::smatch m;
    return std::regex_search(out, m, std::regex("mean loss ([0-9.]+)")) ? m[1].str() : std::string("none");
  };
  r = bash("$MPIRUN -np 2 --oversubscribe $BIN eval " + cfg + " --checkpoint " + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string on_grid = loss_of(r.output);

  // Shapes that still match the tensors, but another model: refused, naming every field with both values.
  r = bash("$BIN eval " + cfg + " --checkpoint " + ckpt + " --set model.n_layer=1 --set model.tied_embeddings=true "
           "--set model.rope_base=100");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.n_layer: the config sets 1, the checkpoint has 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.tied_embeddings: the config sets true, the checkpoint has false"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("model.rope_base: the config sets 100, the checkpoint has 10000"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("mean loss"), std::string::npos) << r.output;

  // No model section at all, one process although the config says cp=2, and no optimizer.safetensors.
  fs::remove(fs::path(ckpt) / "optimizer.safetensors");
  std::ofstream(dir_ / "nomodel.yaml") << "data:\n  source: copy\n  seq_len: 32\nparallel:\n  cp: 2\n"
                                          "train:\n  batch_size: 4\ndevice: cpu\n";
  r = bash("$BIN eval $D/nomodel.yaml --checkpoint " + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model.n_head = 2 (from the checkpoint)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.vocab_size = 16 (from the checkpoint)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("evaluating on dp=1 cp=1 tp=1"), std::string::npos) << r.output;
  EXPECT_EQ(loss_of(r.output), on_grid) << r.output;
}

TEST_F(RunFailures, BadConfigPathsAndRunDirsAreRefused) {
  fs::create_directories(dir_ / "cwd");
  std::ofstream(dir_ / "empty.yaml") << "# only a comment\n";
  ProcessResult r = bash("cd $D/cwd && $BIN train $D; echo rc=$?");
  EXPECT_EQ(exit_code_in(r.output), 2) << r.output;
  EXPECT_NE(r.output.find("is a directory; give a YAML file"), std::string::npos) << r.output;
  r = bash("cd $D/cwd && $BIN train $D/empty.yaml; echo rc=$?");
  EXPECT_EQ(exit_code_in(r.output), 2) << r.output;
  EXPECT_NE(r.output.find("holds no settings"), std::string::npos) << r.output;
  EXPECT_TRUE(names_in(dir_ / "cwd").empty()) << "nothing may be trained or written (runs/default)";
  // A run_dir that cannot be created names train.run_dir and the reason.
  std::ofstream(dir_ / "a_file") << "x";
  for (const std::string& bad : std::vector<std::string>{"/proc/ringtrain_run", (dir_ / "a_file").string()}) {
    r = bash("$BIN train " + config("one.yaml", bad) + " --set parallel.cp=1; echo rc=$?");
    EXPECT_EQ(exit_code_in(r.output), 2) << r.output;
    EXPECT_NE(r.output.find("train.run_dir='" + bad + "' cannot be used"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("filesystem error"), std::string::npos) << r.output;
  }
}

TEST_F(RunFailures, StoppedRankEndsTheJobWithExit4NamingIt) {
  const fs::path run = dir_ / "stop";
  const std::string cfg = config("stop.yaml", run.string());
  const std::string metrics = (run / "metrics.jsonl").string();
  const ProcessResult r = bash(
      "$MPIRUN -np 2 --oversubscribe $BIN train " + cfg + " --set parallel.timeout_s=4 --set train.steps=1000000 "
      "--set checkpoint.every=0 > $D/stop.log 2>&1 &\nm=$!\n"
      "for i in $(seq 600); do [ -s " + metrics + " ] && [ $(wc -l < " + metrics + ") -ge 3 ] && break; sleep 0.1; done\n"
      "holder=$(sed -n 's/^pid \\([0-9]*\\) .*/\\1/p' " + (run / ".lock").string() + ")\n"
      "victim=$(child_pids $m | grep -v \"^$holder\\$\" | head -n 1)\n"
      "echo victim=$victim\nstart=$(date +%s)\nkill -STOP $victim\nwait $m\necho rc=$?\n"
      "echo seconds=$(( $(date +%s) - start ))\ncat $D/stop.log",
      90);
  EXPECT_EQ(exit_code_in(r.output), 4) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("victim=([0-9]+)"))) << r.output;
  EXPECT_NE(r.output.find("absent from it: rank 1 (host "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pid " + m[1].str() + ")"), std::string::npos) << "the stopped rank's pid\n" << r.output;
  EXPECT_NE(r.output.find("parallel.timeout_s = 4 s"), std::string::npos) << r.output;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("seconds=([0-9]+)"))) << r.output;
  EXPECT_LT(std::stoi(m[1]), 30) << r.output;
}

TEST_F(RunFailures, ConfigErrorOnTwoRanksIsPrintedOnceAndLast) {
  const std::string cfg = config("bad.yaml", (dir_ / "never").string());
  const ProcessResult r = bash("$TRAIN " + cfg + " --set model.n_head=3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  const std::string error = "model.d_model=32 is not divisible by model.n_head=3";
  // Once by the job (rank 0), once more by train.sh after mpirun has exited.
  EXPECT_EQ(count_of(r.output, error), 2u) << r.output;
  EXPECT_EQ(count_of(r.output, "ringtrain: error on rank"), 0u) << r.output;
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
  // The last lines: train.sh's reprint, after anything mpirun printed.
  const size_t reprint = r.output.rfind("train.sh: the job failed (exit 2):");
  ASSERT_NE(reprint, std::string::npos) << r.output;
  const std::string tail = r.output.substr(reprint);
  EXPECT_NE(tail.find(error), std::string::npos) << r.output;
  EXPECT_EQ(tail.find("mpirun"), std::string::npos) << "the error must be the last thing printed\n" << r.output;
  EXPECT_EQ(tail.find("-----"), std::string::npos) << "the error must be the last thing printed\n" << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "never"));
}

}  // namespace
