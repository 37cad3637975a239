// A failure on one rank ends the whole job: `mpirun -np 2 rt_fault_victim` with RINGTRAIN_TEST_FAULT_RANK=1
// must exit non-zero within 60 s (no hang in the ring exchange) and name rank 1 on stderr. The same job
// without the fault exits 0, so the launch itself is known to work.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "tests/mpi/process_runner.h"

namespace {

using rt::test::ProcessResult;

// `mpirun -np 2 rt_fault_victim` with the extra environment `env`; killed after 60 s.
ProcessResult run_job(const std::string& env) {
  return rt::test::run_command(env + " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -s KILL 60 " +
                               MPIEXEC_PATH + " -np 2 --oversubscribe " + RT_FAULT_VICTIM + " 2>&1");
}

}  // namespace

TEST(Fault, OneRankFailingEndsTheJobPromptlyAndNamesTheRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  rt::test::scrub_mpi_environment();

  const ProcessResult ok = run_job("");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;

  const ProcessResult bad = run_job("RINGTRAIN_TEST_FAULT_RANK=1");
  EXPECT_NE(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.exit_code, 137) << "killed by the 60 s timeout: the job hung\n" << bad.output;
  EXPECT_LT(bad.seconds, 60.0) << bad.output;
  EXPECT_NE(bad.output.find("ringtrain: error on rank 1: injected test fault at ring_attention.forward"),
            std::string::npos)
      << bad.output;

  // Rank 0 fails inside the ring with its own exchange in flight: unwinding must not wait on it.
  const ProcessResult mid =
      run_job("RINGTRAIN_TEST_FAULT_RANK=0 RINGTRAIN_TEST_FAULT_POINT=ring_attention.forward_step");
  EXPECT_NE(mid.exit_code, 0) << mid.output;
  EXPECT_NE(mid.exit_code, 137) << "killed by the 60 s timeout: the job hung\n" << mid.output;
  EXPECT_NE(mid.output.find("ringtrain: error on rank 0: injected test fault at ring_attention.forward_step"),
            std::string::npos)
      << mid.output;
}
