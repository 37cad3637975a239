// For the suites that launch whole training jobs and then damage them (test_run_dirs.cpp,
// test_run_failures.cpp): a temporary directory, a small 2-rank config (cp=2 ring, a few ms per step on CPU),
// bash scripts run from the source root with the binary under test, and readers for the files a run leaves.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/mpi/process_runner.h"

namespace rt::test {

namespace fs = std::filesystem;

// `child_pids PID [NAME]`: the pids whose parent is PID (and whose name is NAME), read from /proc.
inline constexpr const char* kChildPids = R"SH(child_pids() {
  local parent=$1 name=${2:-} f s pid comm state ppid rest
  for f in /proc/[0-9]*/stat; do
    { read -r s < "$f"; } 2>/dev/null || continue
    pid=${f#/proc/}; pid=${pid%/stat}
    comm=${s#*\(}; comm=${comm%\)*}
    read -r state ppid rest <<< "${s##*\) }"
    [ "$ppid" = "$parent" ] || continue
    [ -z "$name" ] || [ "$comm" = "$name" ] || continue
    echo "$pid"
  done
}
)SH";

class RunJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) GTEST_SKIP() << "launches its own jobs from rank 0";
    scrub_mpi_environment();
    dir_ = fs::temp_directory_path() /
           ("rt_runjob_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    kill_leftovers("at the end of the test");
    if (!HasFailure()) fs::remove_all(dir_);
  }
  // A 2-layer model on the copy task as a cp=2 ring on 2 ranks, into run_dir.
  std::string config(const std::string& name, const std::string& run_dir, const std::string& extra_train = "") {
    const fs::path p = dir_ / name;
    std::ofstream(p) << "model:\n  n_layer: 2\n  d_model: 32\n  n_head: 2\n  n_kv_head: 2\n  vocab_size: 16\n"
                        "  d_ff: 64\n"
                        "data:\n  source: copy\n  seq_len: 32\n"
                        "parallel:\n  dp: 1\n  cp: 2\n  tp: 1\n"
                        "train:\n  batch_size: 4\n  steps: 20\n  eval_every: 0\n  run_dir: " + run_dir + "\n" +
                            extra_train +
                        "optim:\n  lr: 0.01\n  warmup_steps: 2\n"
                        "checkpoint:\n  every: 10\n  keep_last: 2\n"
                        "log:\n  every: 1\n"
                        "device: cpu\n";
    return p.string();
  }
  // Runs a bash script (stdout and stderr captured) from the source root; TRAIN is launch/train.sh with the
  // build under test, BIN the ringtrain binary, MPIRUN mpirun; the whole script is killed after `limit_s`.
  // `child_pids PID [NAME]` lists PID's children (named NAME) from /proc, so that no procps is needed (a
  // fresh Debian 12 has no pgrep). A job the script leaves behind (train.sh runs mpirun in a session of its
  // own, so killing the script does not reach it) is killed afterwards and fails the test: a job left spinning
  // would starve every later test on a 2-core machine.
  ProcessResult bash(const std::string& script, int limit_s = 120) {
    const fs::path file = dir_ / ("script_" + std::to_string(scripts_++) + ".sh");
    const std::string build = fs::path(RINGTRAIN_BINARY).parent_path().string();
    std::ofstream(file) << "set -u\ncd '" << RT_SOURCE_DIR << "'\nexport BUILD_DIR='" << build
                        << "' OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1\n"
                        << "TRAIN=launch/train.sh\nBIN='" << RINGTRAIN_BINARY << "'\nMPIRUN=mpirun\nD='"
                        << dir_.string() << "'\n"
                        << kChildPids << script << "\n";
    ProcessResult r = run_command("timeout -s KILL " + std::to_string(limit_s) + " bash '" + file.string() + "' 2>&1");
    kill_leftovers("after script " + file.filename().string());
    return r;
  }
  // SIGKILLs every process whose command line names this test's directory (a job's mpirun and ranks take
  // their config from it); each one found fails the test.
  void kill_leftovers(const std::string& when) {
    const std::string mark = dir_.string() + "/";
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const int pid = std::stoi(name);
      if (pid == ::getpid()) continue;
      std::ifstream in(entry.path() / "cmdline", std::ios::binary);
      std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmdline.find(mark) == std::string::npos) continue;
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      if (::kill(pid, SIGKILL) == 0)
        ADD_FAILURE() << when << ": process " << pid << " was still running (killed it): " << cmdline;
    }
  }
  fs::path dir_;
  int scripts_ = 0;
};

// step -> how many training lines (with "loss") metrics.jsonl holds for it.
inline std::map<int, int> step_counts(const fs::path& metrics) {
  std::map<int, int> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss") && j.contains("step")) ++out[j["step"].get<int>()];
  }
  return out;
}

// The names in a directory, sorted ("" entries never).
inline std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline size_t count_of(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace rt::test
