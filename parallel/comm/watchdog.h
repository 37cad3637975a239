// The watchdog of the MPI path (DESIGN.md "Failures"): a rank that waits in a collective for longer than the
// current limit (parallel.timeout_s; parallel.save_timeout_s while a checkpoint is written) ends the job with
// exit code 4 and a message naming the ranks that never arrived, with their hosts and pids.
//
// How absent ranks are found: while a rank waits (watchdog_wait polls its MPI requests), it sends a heartbeat
// to every other rank once a second on a communicator of its own. A rank that is waiting too answers; a rank
// that is stopped (SIGSTOP), dead, or stuck outside any collective does not. At the limit, the ranks of the
// collective not heard from in the last 3 s are the absent ones. The lowest-ranked waiting rank prints the
// message (the others give it 5 s) and calls MPI_Abort(MPI_COMM_WORLD, 4).
// Heartbeats go to every rank while waiting: N-1 tiny messages a second per waiting rank.
// The NCCL path has its own watchdog (parallel/comm/cuda/nccl_watchdog.h), whose default limit is the same
// parallel.timeout_s (RINGTRAIN_NCCL_TIMEOUT_S overrides it).
#pragma once
#include <mpi.h>

#include <string>

namespace rt {

constexpr int kExitWatchdog = 4;

// Collective over MPI_COMM_WORLD: gathers every rank's host and pid, creates the heartbeat communicator.
// Without MPI, or with one rank, only records the limits. Calling it again only updates the limits.
void watchdog_init(double timeout_s, double save_timeout_s);
// Collective; frees what watchdog_init made (call before MPI_Finalize). Safe to call when never initialised.
void watchdog_shutdown();
bool watchdog_active();
// What this rank is doing, shown in the message ("step 12"); `saving` selects the save limit.
void watchdog_set_phase(const std::string& phase, bool saving);
// The limit in force now (seconds); 600 before watchdog_init.
double watchdog_timeout_s();

// Waits for `count` requests of a collective on `comm` named `collective` ("all_reduce", "barrier", ...).
// Without watchdog_init this is MPI_Waitall.
void watchdog_wait(MPI_Request* requests, int count, MPI_Comm comm, const char* collective);
// MPI_Ibarrier on MPI_COMM_WORLD + watchdog_wait (a no-op without MPI or with one rank).
void watchdog_barrier(const char* what);

// "host:pid" of this process.
std::string this_host();

}  // namespace rt
