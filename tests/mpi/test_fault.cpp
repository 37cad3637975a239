// A failure on one rank ends the whole job: `mpirun -np 2 rt_fault_victim` with RINGTRAIN_TEST_FAULT_RANK=1
// must exit non-zero within 60 s (no hang in the ring exchange) and name rank 1 on stderr. The same job
// without the fault exits 0, so the launch itself is known to work.
#include <gtest/gtest.h>
#include <mpi.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct JobResult {
  int exit_code = -1;
  double seconds = 0;
  std::string output;  // stdout and stderr
};

// The launcher itself runs under mpirun; drop the variables that would make the inner mpirun think it is
// part of this job, keeping the ones that allow running as root.
void scrub_mpi_environment() {
  std::vector<std::string> names;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    const bool mpi_var = name.rfind("OMPI_", 0) == 0 || name.rfind("PMIX_", 0) == 0 ||
                         name.rfind("ORTE_", 0) == 0 || name.rfind("OPAL_", 0) == 0;
    if (mpi_var && name.rfind("OMPI_ALLOW_RUN_AS_ROOT", 0) != 0) names.push_back(name);
  }
  for (const std::string& name : names) unsetenv(name.c_str());
}

JobResult run_job(const std::string& env) {
  const std::string cmd = env + " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -s KILL 60 " +
                          MPIEXEC_PATH + " -np 2 --oversubscribe " + RT_FAULT_VICTIM + " 2>&1";
  JobResult r;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, got);
  const int status = pclose(pipe);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace

TEST(Fault, OneRankFailingEndsTheJobPromptlyAndNamesTheRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  scrub_mpi_environment();

  const JobResult ok = run_job("");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;

  const JobResult bad = run_job("RINGTRAIN_TEST_FAULT_RANK=1");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.exit_code, 137) << "killed by the 60 s timeout: the job hung\n" << bad.output;
  EXPECT_LT(bad.seconds, 60.0) << bad.output;
  EXPECT_NE(bad.output.find("ringtrain: error on rank 1: injected test fault at ring_attention.forward"),
            std::string::npos)
      << bad.output;

  // Rank 0 fails inside the ring with its own exchange in flight: unwinding must not wait on it.
  const JobResult mid = run_job("RINGTRAIN_TEST_FAULT_RANK=0 RINGTRAIN_TEST_FAULT_POINT=ring_attention.forward_step");
  EXPECT_NE(mid.exit_code, 0) << mid.output;
  EXPECT_NE(mid.exit_code, 137) << "killed by the 60 s timeout: the job hung\n" << mid.output;
  EXPECT_NE(mid.output.find("ringtrain: error on rank 0: injected test fault at ring_attention.forward_step"),
            std::string::npos)
      << mid.output;
}
