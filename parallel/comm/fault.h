// Failures on one rank must end the whole job promptly, never leave the others hanging in a collective.
// run_or_abort wraps a rank's work: an exception becomes one line on stderr naming the rank and the cause,
// then MPI_Abort(MPI_COMM_WORLD, 1) takes every rank down (mpirun exits non-zero).
#pragma once
#include <functional>
#include <string>

namespace rt {

// Prints `line` (one or more lines, no trailing newline needed) to stderr and, when the environment names
// RINGTRAIN_ERROR_FILE (launch/train.sh does), appends it there too, so the launcher can print it again
// after mpirun's own messages.
void report_error_line(const std::string& line);
// report_error_line(line), then MPI_Abort(MPI_COMM_WORLD, code) when MPI runs with several ranks, else exit.
[[noreturn]] void abort_job_with(const std::string& line, int code);

// Runs body and returns its result. On any exception prints "ringtrain: error on rank R: <cause>" to stderr
// and calls MPI_Abort(MPI_COMM_WORLD, 1) when MPI is initialised (returns 1 otherwise).
int run_or_abort(const std::function<int()>& body);

// Test hook. When the environment has RINGTRAIN_TEST_FAULT_RANK=r and this process is world rank r, throws
// rt::Error("injected test fault at <point>") the first time a point is reached; set
// RINGTRAIN_TEST_FAULT_POINT=<point> to pick one named point. Points: "ring_attention.forward",
// "ring_attention.forward_step" (inside the ring, an exchange in flight), "ring_attention.backward" (and
// any the trainer adds). Costs one cached check when unset.
void maybe_inject_fault(const char* point);

}  // namespace rt
