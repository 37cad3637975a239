#!/usr/bin/env python3
"""launch/train.sh and repeated signals (issue 31, row 3), with a stand-in mpirun and stand-in ranks, so that no
build is needed and the timing is under the test's control:
  - two signals (SIGTERM, SIGTERM): the first reaches mpirun as SIGUSR1, the second as SIGTERM; train.sh keeps
    waiting until mpirun and the ranks have ended, and exits only then;
  - three signals (Ctrl-C, Ctrl-C, SIGTERM) to a job that ignores SIGUSR1 and SIGTERM: the third kills the job
    (mpirun and the ranks, which sit in process groups of their own, as Open MPI's do) and says so;
  - a job whose mpirun exits leaving a rank behind: train.sh kills the rank and says so;
  - two Ctrl-C to a job whose mpirun ends 1 after SIGTERM (Open MPI's way; issue 43, row 12): train.sh exits 130
    with its closing line (two SIGTERMs: 143), not mpirun's 1.
In every case no process of the job is alive when train.sh has exited.

  test_train_signals.py            (uses launch/train.sh of this tree)
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_SH = os.path.join(HERE, "..", "..", "launch", "train.sh")
failures = []

# mpirun -np N ... <binary> train <config> ...: starts N ranks, each in a process group of its own (as Open MPI
# does), records every pid, and handles SIGUSR1/SIGTERM as FAKE_MPIRUN_MODE says:
#   forward: USR1 and TERM are passed to the ranks; after TERM the ranks are SIGKILLed a second later (Open MPI);
#   stuck:   both are logged and ignored (a hung mpirun);
#   orphan:  the ranks are started, then mpirun exits at once with 1, leaving them running;
#   openmpi: as forward, but after TERM mpirun kills the ranks and exits 1 (what Open MPI's mpirun does).
FAKE_MPIRUN = r'''#!/usr/bin/env python3
import os, signal, subprocess, sys, time
log = os.environ["FAKE_JOB_DIR"]
mode = os.environ["FAKE_MPIRUN_MODE"]
argv = sys.argv[1:]
n = int(argv[argv.index("-np") + 1])
binary = next(a for a in argv if a.endswith("/ringtrain"))
rest = argv[argv.index(binary):]
def note(line):
    with open(os.path.join(log, "events"), "a") as f:
        f.write(line + "\n")
ranks = []
def on_signal(sig, _):
    note(f"mpirun got {signal.Signals(sig).name}")
    if mode in ("forward", "openmpi"):
        for r in ranks:
            os.kill(r.pid, sig)
        if sig == signal.SIGTERM and mode == "openmpi":
            time.sleep(0.5)
            for r in ranks:
                if r.poll() is None:
                    r.kill()
            sys.exit(1)
        if sig == signal.SIGTERM:
            time.sleep(1.0)
            for r in ranks:
                if r.poll() is None:
                    r.kill()
signal.signal(signal.SIGUSR1, on_signal)
signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, signal.SIG_IGN)
ranks += [subprocess.Popen(rest, preexec_fn=os.setpgrp) for _ in range(n)]
with open(os.path.join(log, "pids"), "a") as f:
    f.write(" ".join(str(p) for p in [os.getpid()] + [r.pid for r in ranks]) + "\n")
if mode == "orphan":
    sys.exit(1)
codes = [r.wait() for r in ranks]
sys.exit(max(c if c >= 0 else 128 - c for c in codes))
'''

# A rank: a long step; SIGUSR1 starts a slow "save" (it then exits 138), SIGTERM ends it 0.3 s later (143).
# FAKE_RANK_IGNORE=1: the rank ignores both.
FAKE_RANK = r'''#!/usr/bin/env python3
import os, signal, sys, time
if os.environ.get("FAKE_RANK_IGNORE") == "1":
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    def on_usr1(*_):
        time.sleep(60)  # a save slower than the test
        sys.exit(138)
    def on_term(*_):
        time.sleep(0.3)
        sys.exit(143)
    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, signal.SIG_IGN)
time.sleep(120)
'''


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def alive(pid):
    """True for a process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def write_exec(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


class Job:
    """launch/train.sh on a two-rank config with the stand-ins; its own session, so that cleanup can reach all."""

    def __init__(self, tmp, name, mode, rank_ignore=False):
        self.dir = os.path.join(tmp, name)
        os.makedirs(os.path.join(self.dir, "bin"))
        os.makedirs(os.path.join(self.dir, "build"))
        write_exec(os.path.join(self.dir, "bin", "mpirun"), FAKE_MPIRUN)
        write_exec(os.path.join(self.dir, "build", "ringtrain"), FAKE_RANK)
        config = os.path.join(self.dir, "job.yaml")
        with open(config, "w") as f:
            f.write("device: cpu\nparallel:\n  cp: 2\n")
        env = dict(os.environ, PATH=os.path.join(self.dir, "bin") + os.pathsep + os.environ["PATH"],
                   BUILD_DIR=os.path.join(self.dir, "build"), FAKE_JOB_DIR=self.dir, FAKE_MPIRUN_MODE=mode,
                   FAKE_RANK_IGNORE="1" if rank_ignore else "0", TMPDIR=self.dir)
        self.log = open(os.path.join(self.dir, "train.log"), "w")
        self.proc = subprocess.Popen(["bash", TRAIN_SH, config], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        self.pids = []
        deadline = time.time() + 20
        while time.time() < deadline and len(self.pids) < 3:
            time.sleep(0.05)
            try:
                with open(os.path.join(self.dir, "pids")) as f:
                    self.pids = [int(p) for p in f.read().split()]
            except (FileNotFoundError, ValueError):
                pass
        check(len(self.pids) == 3, f"{name}: the stand-in mpirun started 2 ranks (pids {self.pids})")
        time.sleep(0.3)  # the ranks install their handlers

    def signal(self, sig):
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass  # train.sh has already gone: the checks say what that left behind

    def output(self):
        with open(os.path.join(self.dir, "train.log")) as f:
            return f.read()

    def events(self):
        try:
            with open(os.path.join(self.dir, "events")) as f:
                return f.read().split("\n")[:-1]
        except FileNotFoundError:
            return []

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def survivors(self):
        return [p for p in self.pids if alive(p)]

    def cleanup(self):
        """Whatever the outcome, nothing started here is left running."""
        for pid in self.pids + [self.proc.pid]:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait()
        self.log.close()


def two_signals(tmp):
    job = Job(tmp, "two", "forward")
    try:
        job.signal(signal.SIGTERM)
        time.sleep(0.5)
        check(job.proc.poll() is None and job.events() == ["mpirun got SIGUSR1"],
              f"two signals: the first reaches mpirun as SIGUSR1 and train.sh waits (events {job.events()})")
        job.signal(signal.SIGTERM)
        time.sleep(0.2)
        still = job.proc.poll() is None
        check(still, "two signals: 0.2 s after the second, train.sh still waits for the job")
        rc = job.wait(20)
        left = job.survivors()
        check(rc == 143, f"two signals: train.sh ends with 143, 128 + SIGTERM (exit {rc})")
        check(not left, f"two signals: no process of the job survives train.sh (alive: {left})")
        check(job.events() == ["mpirun got SIGUSR1", "mpirun got SIGTERM"],
              f"two signals: the second reaches mpirun as SIGTERM (events {job.events()})")
        check("second signal (15)" in job.output(), "two signals: train.sh says the second signal stops the ranks")
        check("stopped on signal 15 by a second signal" in job.output(), "two signals: train.sh's closing line")
    finally:
        job.cleanup()
        if failures:
            print(job.output())


def three_signals(tmp):
    job = Job(tmp, "three", "stuck", rank_ignore=True)
    try:
        job.signal(signal.SIGINT)
        time.sleep(0.3)
        job.signal(signal.SIGINT)
        time.sleep(1.0)
        check(job.proc.poll() is None and job.survivors() == job.pids,
              f"three signals: a stuck job after two signals: train.sh still waits (exit {job.proc.poll()})")
        check(job.events() == ["mpirun got SIGUSR1", "mpirun got SIGTERM"],
              f"three signals: mpirun got SIGUSR1 then SIGTERM (events {job.events()})")
        t0 = time.time()
        job.signal(signal.SIGTERM)
        rc = job.wait(20)
        took = time.time() - t0
        left = job.survivors()
        check(rc == 137 and took < 10, f"three signals: train.sh ends with the killed mpirun's 137 (exit {rc}, "
                                       f"{took:.1f} s)")
        check(not left, f"three signals: mpirun and both ranks are dead when train.sh has exited (alive: {left})")
        out = job.output()
        check("killing mpirun and every rank" in out, "three signals: train.sh says it killed the job")
    finally:
        job.cleanup()
        if failures:
            print(job.output())


def orphaned_rank(tmp):
    job = Job(tmp, "orphan", "orphan")
    try:
        rc = job.wait(20)
        left = job.survivors()
        check(rc == 1, f"mpirun exits 1 leaving its ranks: train.sh exits 1 (exit {rc})")
        check(not left, f"mpirun exits leaving its ranks: they are killed (alive: {left})")
        check("outlived mpirun; killing them" in job.output(), "mpirun exits leaving its ranks: train.sh says so")
    finally:
        job.cleanup()
        if failures:
            print(job.output())


def two_ctrl_c_open_mpi(tmp):
    job = Job(tmp, "ctrlc", "openmpi")
    try:
        job.signal(signal.SIGINT)
        time.sleep(0.5)
        job.signal(signal.SIGINT)
        rc = job.wait(20)
        out = job.output()
        check(rc == 130, f"two Ctrl-C, mpirun ending 1 after SIGTERM: train.sh exits 130 (exit {rc})")
        check("stopped on signal 2 by a second signal" in out and "checkpoint.resume=auto" in out.splitlines()[-1],
              "two Ctrl-C: train.sh ends with its closing line")
        check(not job.survivors(), f"two Ctrl-C: no process of the job survives (alive: {job.survivors()})")
    finally:
        job.cleanup()
        if failures:
            print(job.output())


def main():
    if not os.path.isdir("/proc/self"):
        print("SKIP: needs /proc")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="rt_train_signals_") as tmp:
        two_signals(tmp)
        three_signals(tmp)
        orphaned_rank(tmp)
        two_ctrl_c_open_mpi(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
