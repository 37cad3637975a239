// Exit codes and how errors leave the process (README "When things go wrong"):
//   0 finished; 2 config or data error; 3 divergence; 4 watchdog; 128+N stopped by signal N after a complete
//   save; 1 anything else.
// An error found by every rank alike (a config, a refused run_dir or resume) is agreed on collectively and
// printed once, by the lowest failing rank (rank 0 when all fail), without MPI_Abort's banner; any other error
// is printed by the rank that hit it, naming the rank and its host, and aborts the job with its code.
#pragma once
#include <functional>
#include <string>

#include "kernels/tensor.h"
#include "parallel/watchdog.h"

namespace rt {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;       // config or data error
constexpr int kExitDivergence = 3;  // non-finite loss or grad norm, or a loss spike (train.divergence_factor)
static_assert(kExitWatchdog == 4, "parallel/watchdog.h owns exit code 4");

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

// Runs `body` on every rank of MPI_COMM_WORLD (or alone when MPI is not running); collective. When it throws
// on any rank, every rank throws the same AgreedError: the message of the lowest failing rank, with that
// error's code (a RunError's, else `code`).
void agree_on(const std::function<void()>& body, int code);

}  // namespace rt
