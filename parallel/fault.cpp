#include "parallel/fault.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "kernels/tensor.h"

namespace rt {

namespace {

int world_rank_or_zero() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = 0;
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

[[noreturn]] void abort_job(const std::string& cause) {
  std::fprintf(stderr, "ringtrain: error on rank %d: %s\n", world_rank_or_zero(), cause.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

}  // namespace

int run_or_abort(const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    abort_job(e.what());
  } catch (...) {
    abort_job("unknown exception");
  }
}

void maybe_inject_fault(const char* point) {
  static const int fault_rank = [] {
    const char* v = std::getenv("RINGTRAIN_TEST_FAULT_RANK");
    return v && *v ? std::atoi(v) : -1;
  }();
  if (fault_rank < 0) return;
  static bool fired = false;
  if (fired) return;
  const char* want = std::getenv("RINGTRAIN_TEST_FAULT_POINT");
  if (want && *want && std::strcmp(want, point) != 0) return;
  if (world_rank_or_zero() != fault_rank) return;
  fired = true;
  RT_CHECK(false, "injected test fault at " << point << " (RINGTRAIN_TEST_FAULT_RANK=" << fault_rank << ")");
}

}  // namespace rt
