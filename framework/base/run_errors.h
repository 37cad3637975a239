// Exit codes and how errors leave the process: the one table (README "When things go wrong" says the same;
// tests/mpi/test_exit_codes.cpp runs each class through the real binary):
//   0      finished (also --help)
//   2      usage, config, data or checkpoint error: a command-line error (unknown option, bad value, missing
//          argument), an invalid config, a data file that is missing or bad, a run directory in use or holding
//          another run, a refused or corrupted resume, device: cuda without a GPU, plan's input errors, a count
//          out of range or an option that cannot take effect, a data file changed under a running job, an output
//          that cannot be written (exists without --overwrite, a directory, a full disk); on every command and
//          any number of ranks, without a source location
//   3      divergence
//   4      watchdog: a rank waited past parallel.timeout_s
//   128+N  stopped by signal N after a complete save (launch/train.sh: also after a second signal stopped the
//          ranks without the save)
//   1      anything else (an internal error)
// An error found by every rank alike (a config, a refused run_dir or resume) is agreed on collectively and
// printed once, by the lowest failing rank (rank 0 when all fail), without MPI_Abort's banner; any other error
// is printed by the rank that hit it, naming the rank and its host, and aborts the job with its code.
#pragma once
#include <functional>
#include <string>

#include "kernels/tensor.h"
#include "parallel/comm/watchdog.h"

namespace rt {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;       // usage, config, data or checkpoint error
constexpr int kExitDivergence = 3;  // non-finite loss or grad norm, or a loss spike (train.divergence_factor)
static_assert(kExitWatchdog == 4, "parallel/comm/watchdog.h owns exit code 4");

// An error that ends the run with `code`.
class RunError : public Error {
 public:
  RunError(int code, const std::string& message) : Error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Thrown on every rank together (by agree_on): main prints it once and exits with its code, no abort.
class AgreedError : public RunError {
 public:
  AgreedError(int code, const std::string& message, int origin_rank)
      : RunError(code, message), origin_rank_(origin_rank) {}
  int origin_rank() const { return origin_rank_; }

 private:
  int origin_rank_;
};

// The message as a user sees it: an error of the user's input (any code but kExitFailure) without the
// " [file.cpp:123]" source locations that RT_CHECK appends for developers; an internal error keeps them.
std::string user_message(const std::string& message, int code);

// Runs `body` on every rank of MPI_COMM_WORLD (or alone when MPI is not running); collective. When it throws
// on any rank, every rank throws the same AgreedError: the message of the lowest failing rank, with that
// error's code (a RunError's, else `code`).
void agree_on(const std::function<void()>& body, int code);

}  // namespace rt
