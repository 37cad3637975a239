#include "parallel/comm/watchdog.h"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "parallel/comm/fault.h"

namespace rt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kHeartbeatTag = 7;
constexpr double kHeartbeatEvery_s = 1.0;
constexpr double kAbsentAfter_s = 3.0;   // not heard from for this long at the limit: absent
constexpr double kPrinterGrace_s = 5.0;  // a higher rank waits this long for the lowest waiting one to speak

struct Heartbeat {
  int rank;
  char collective[60];
};

struct Peer {
  std::string host;
  int pid = 0;
  double last_heard = -1e30;  // seconds since start, local clock
  char collective[60] = {0};
  MPI_Request send = MPI_REQUEST_NULL;
  Heartbeat out{};
};

struct State {
  bool mpi = false;  // heartbeats and hosts exist (MPI with more than one rank)
  double timeout_s = 600, save_timeout_s = 3600;
  bool saving = false;
  std::string phase = "start-up";
  MPI_Comm hb = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::vector<Peer> peers;
  Heartbeat in{};
  MPI_Request recv = MPI_REQUEST_NULL;
  Clock::time_point start = Clock::now();
};

State& state() {
  static State s;
  return s;
}

double now_s() { return std::chrono::duration<double>(Clock::now() - state().start).count(); }

void post_receive(State& s) { MPI_Irecv(&s.in, sizeof(Heartbeat), MPI_BYTE, MPI_ANY_SOURCE, kHeartbeatTag, s.hb, &s.recv); }

void drain_heartbeats(State& s) {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Test(&s.recv, &flag, &status);
    if (!flag) return;
    const int from = status.MPI_SOURCE;
    if (from >= 0 && from < s.size) {
      s.peers[size_t(from)].last_heard = now_s();
      std::memcpy(s.peers[size_t(from)].collective, s.in.collective, sizeof s.in.collective);
    }
    post_receive(s);
  }
}

void send_heartbeats(State& s, const char* collective) {
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank) continue;
    Peer& p = s.peers[size_t(r)];
    if (p.send != MPI_REQUEST_NULL) {  // the previous one to this rank is still in flight: skip
      int flag = 0;
      MPI_Test(&p.send, &flag, MPI_STATUS_IGNORE);
      if (!flag) continue;
    }
    p.out.rank = s.rank;
    std::snprintf(p.out.collective, sizeof p.out.collective, "%s", collective);
    MPI_Isend(&p.out, sizeof(Heartbeat), MPI_BYTE, r, kHeartbeatTag, s.hb, &p.send);
  }
}

// World ranks of `comm`'s members.
std::vector<int> world_ranks_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  MPI_Group group, world;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(static_cast<size_t>(n)), global(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) local[size_t(i)] = i;
  MPI_Group_translate_ranks(group, n, local.data(), world, global.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return global;
}

[[noreturn]] void fire(State& s, const std::vector<int>& members, const std::vector<int>& absent, double waited,
                       const char* collective) {
  std::ostringstream os;
  os << "watchdog: rank " << s.rank << " (" << s.peers[size_t(s.rank)].host << ") waited " << int(waited)
     << " s in " << collective << " over ranks {";
  for (size_t i = 0; i < members.size(); ++i) os << (i ? "," : "") << members[i];
  os << "} during " << s.phase << "; ";
  if (absent.empty()) {
    os << "every rank of it still sends heartbeats, so they all wait (a mismatched collective?)";
  } else {
    os << (absent.size() == 1 ? "absent from it: " : "absent from it (never arrived): ");
    for (size_t i = 0; i < absent.size(); ++i) {
      const Peer& p = s.peers[size_t(absent[i])];
      os << (i ? ", " : "") << "rank " << absent[i] << " (host " << p.host << ", pid " << p.pid << ")";
    }
    os << " (stopped, dead, or stuck outside any collective)";
  }
  os << ". The limit is parallel." << (s.saving ? "save_timeout_s" : "timeout_s") << " = "
     << (s.saving ? s.save_timeout_s : s.timeout_s) << " s; raise it if this work legitimately takes longer";
  report_error_line("ringtrain: error: " + os.str());
  MPI_Abort(MPI_COMM_WORLD, kExitWatchdog);
  std::_Exit(kExitWatchdog);
}

}  // namespace

std::string this_host() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

void watchdog_init(double timeout_s, double save_timeout_s) {
  State& s = state();
  s.timeout_s = timeout_s, s.save_timeout_s = save_timeout_s;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || s.mpi) return;
  MPI_Comm_size(MPI_COMM_WORLD, &s.size);
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  if (s.size == 1) return;
  char host[64] = {0};
  ::gethostname(host, sizeof host - 1);
  std::vector<char> hosts(size_t(s.size) * sizeof host);
  std::vector<int> pids(size_t(s.size));
  const int pid = int(::getpid());
  MPI_Allgather(host, sizeof host, MPI_CHAR, hosts.data(), sizeof host, MPI_CHAR, MPI_COMM_WORLD);
  MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  s.peers.assign(size_t(s.size), Peer{});
  for (int r = 0; r < s.size; ++r) {
    s.peers[size_t(r)].host = std::string(&hosts[size_t(r) * sizeof host]);
    s.peers[size_t(r)].pid = pids[size_t(r)];
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &s.hb);
  post_receive(s);
  s.mpi = true;
}

void watchdog_shutdown() {
  State& s = state();
  if (!s.mpi) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Barrier(s.hb);
  drain_heartbeats(s);
  MPI_Cancel(&s.recv);
  MPI_Wait(&s.recv, MPI_STATUS_IGNORE);
  for (Peer& p : s.peers)
    if (p.send != MPI_REQUEST_NULL) MPI_Request_free(&p.send);
  MPI_Comm_free(&s.hb);
  s.mpi = false;
}

bool watchdog_active() { return state().mpi; }

void watchdog_set_phase(const std::string& phase, bool saving) {
  state().phase = phase;
  state().saving = saving;
}

double watchdog_timeout_s() {
  const State& s = state();
  return s.saving ? s.save_timeout_s : s.timeout_s;
}

void watchdog_wait(MPI_Request* requests, int count, MPI_Comm comm, const char* collective) {
  State& s = state();
  if (!s.mpi) {
    MPI_Waitall(count, requests, MPI_STATUSES_IGNORE);
    return;
  }
  const double start = now_s();
  double last_sent = -1e30;
  std::vector<int> members;  // world ranks of comm, computed only if the wait gets long
  for (unsigned spin = 0;; ++spin) {
    int done = 0;
    MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    if (spin % 64 != 63) continue;
    sched_yield();
    const double t = now_s();
    if (t - start < 0.5) continue;  // short waits: no heartbeat traffic at all
    drain_heartbeats(s);
    if (t - last_sent >= kHeartbeatEvery_s) send_heartbeats(s, collective), last_sent = t;
    const double limit = watchdog_timeout_s();
    if (t - start < limit) continue;
    if (members.empty()) members = world_ranks_of(comm);
    std::vector<int> absent;
    bool lower_rank_waits = false;
    for (int r : members) {
      if (r == s.rank) continue;
      const bool heard = t - s.peers[size_t(r)].last_heard < kAbsentAfter_s;
      if (!heard) absent.push_back(r);
      else if (r < s.rank) lower_rank_waits = true;
    }
    if (lower_rank_waits && t - start < limit + kPrinterGrace_s) continue;
    fire(s, members, absent, t - start, collective);
  }
}

void watchdog_barrier(const char* what) {
  if (!state().mpi) return;
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  watchdog_wait(&r, 1, MPI_COMM_WORLD, what);
}

}  // namespace rt
