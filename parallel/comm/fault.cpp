#include "parallel/comm/fault.h"

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
  abort_job_with("ringtrain: error on rank " + std::to_string(world_rank_or_zero()) + ": " + cause, 1);
}

}  // namespace

void report_error_line(const std::string& line) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  const char* path = std::getenv("RINGTRAIN_ERROR_FILE");
  if (!path || !*path) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

void abort_job_with(const std::string& line, int code) {
  report_error_line(line);
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

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
