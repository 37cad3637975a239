// For the suites that launch jobs of their own (test_fault.cpp, test_train_launch.cpp): run a shell command,
// capturing its exit code, its stdout and stderr together, and its wall time; and clear this process's MPI
// environment first so that an inner mpirun does not think it is part of the outer job.
#pragma once
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace rt::test {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed; -1 when the command could not be started
  double seconds = 0;  // wall time
  std::string output;  // what the command wrote to stdout
};

// The test itself runs under mpirun; drop the variables that would make an inner mpirun join this job,
// keeping the ones that allow running as root, and undo mpirun's binding of this rank to one core: the jobs it
// launches inherit the binding, and a job whose ranks spin on that one core starves the next job's mpirun
// (CI failed so: the second of two concurrent runs never started). The kernel keeps the mask inside the cpuset.
inline void scrub_mpi_environment() {
  cpu_set_t every_cpu;
  CPU_ZERO(&every_cpu);
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  for (long c = 0; c < cpus && c < CPU_SETSIZE; ++c) CPU_SET(int(c), &every_cpu);
  (void)sched_setaffinity(0, sizeof every_cpu, &every_cpu);  // best effort: a refusal leaves the binding as it was
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

// Runs `command` through /bin/sh and captures its stdout; end `command` in `2>&1` to capture stderr too.
inline ProcessResult run_command(const std::string& command) {
  ProcessResult r;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t got = std::fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, got);
  const int status = pclose(pipe);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace rt::test
