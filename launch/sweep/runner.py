"""Running one point: plan it (`ringtrain plan --json`), decide whether it fits, train it through
launch/train.sh with the right rank count, and keep its outcome in points/<id>/status.json.

Status values: done | failed | skipped (predicted not to fit) | interrupted (stopped by the user or by the
sweep's time budget: run again on resume). A resumed sweep does not rerun done, skipped or failed points
whose command is unchanged (failed ones only with --retry-failed).
"""
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time

import yaml

import measure

FINISHED = ("done", "skipped", "failed")
GIB = 2.0**30


def fingerprint(base_ref, overrides, env, mpirun):
    text = json.dumps({"base": base_ref, "overrides": overrides, "env": env, "mpirun": mpirun}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def error_from_output(text, returncode):
    """The line that says what went wrong: ringtrain's own error line if present."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    pick = None
    for marker in ("ringtrain: error", "error:", "Error", "train.sh:"):
        hits = [l for l in lines if marker in l]
        if hits:
            pick = hits[0]
            break
    if pick is None and lines:
        pick = lines[-1]
    message = (pick or "no output")[:400]
    return f"{message} (exit code {returncode})"


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def run_env(extra):
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.update(extra)
    return env


class PointRunner:
    def __init__(self, sweep, out_dir, base_config, base_ref, build_dir, repo_root, extra_mpirun, verbose):
        self.sweep = sweep
        self.out_dir = out_dir
        self.base_config = base_config      # the config file every point starts from
        self.base_ref = base_ref            # what identifies it in the fingerprint
        self.build_dir = build_dir
        self.repo_root = repo_root
        self.mpirun = list(sweep.mpirun) + list(extra_mpirun)
        self.verbose = verbose
        self.binary = os.path.join(build_dir, "ringtrain")

    # ---- per-point files ----
    def point_dir(self, point):
        return os.path.join(self.out_dir, "points", point.id)

    def run_dir(self, point):
        return os.path.join(self.point_dir(point), "run")

    def status_path(self, point):
        return os.path.join(self.point_dir(point), "status.json")

    def fingerprint(self, point):
        return fingerprint(self.base_ref, point.overrides, self.sweep.env, self.mpirun)

    def load_status(self, point):
        return read_json(self.status_path(point))

    def save_status(self, point, status):
        os.makedirs(self.point_dir(point), exist_ok=True)
        write_json(self.status_path(point), status)

    def new_status(self, point):
        return {"id": point.id, "index": point.index, "values": point.values, "overrides": point.overrides,
                "fingerprint": self.fingerprint(point), "status": "pending", "error": ""}

    # ---- plan ----
    def plan(self, point):
        """(plan dict, None) or (None, error)."""
        cmd = [self.binary, "plan", self.base_config, "--json"]
        for o in point.overrides:
            cmd += ["--set", o]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=run_env(self.sweep.env),
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, "ringtrain plan took longer than 600 s"
        if proc.returncode != 0:
            return None, "plan: " + error_from_output(proc.stderr + proc.stdout, proc.returncode)
        for line in reversed(proc.stdout.splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    return json.loads(line), None
                except ValueError:
                    break
        return None, "plan: no JSON in the output of `ringtrain plan --json` (is the build older than the sweep?)"

    def devices_for(self, plan):
        """Devices the point's ranks spread over: the sweep's `gpus` (capped at the rank count), else one per
        rank on GPUs. CPU ranks share one host."""
        ranks = int(plan["world_size"])
        if self.sweep.gpus:
            return min(ranks, self.sweep.gpus)
        return ranks if plan.get("device") == "cuda" else 1

    def fit(self, plan):
        """(fits, note): memory per device = ranks on it x (predicted peak + what the arena does not count)."""
        ranks = int(plan["world_size"])
        devices = self.devices_for(plan)
        per_device = math.ceil(ranks / devices)
        per_rank = float(plan["peak_bytes_per_rank"]) + float(plan.get("reserve_bytes_per_rank") or 0)
        need = per_device * per_rank
        limit = self.sweep.device_memory_bytes or plan.get("device_bytes")
        what = "GPU" if plan.get("device") == "cuda" else "host"
        if not limit:
            return True, f"needs {need / GIB:.2f} GiB per {what}; device memory unknown (set device_memory_gib)"
        note = (f"predicted {need / GIB:.2f} GiB per {what} ({per_device} rank(s) x {per_rank / GIB:.2f} GiB) "
                f"vs {limit / GIB:.2f} GiB")
        return need <= limit, note

    # ---- run ----
    def train_command(self, point):
        cmd = ["bash", os.path.join(self.repo_root, "launch", "train.sh"), self.base_config]
        for o in point.overrides + [f"train.run_dir={self.run_dir(point)}"]:
            cmd += ["--set", o]
        if self.mpirun:
            cmd += ["--"] + self.mpirun
        return cmd

    def run(self, point, timeout_s, budget_timeout_s=None):
        """Trains the point. Returns (status, error, seconds). A point killed by timeout_s (the sweep's
        measure.timeout_s) failed; one killed by budget_timeout_s (the --time-budget) is interrupted."""
        run_dir = self.run_dir(point)
        if os.path.isdir(run_dir):
            shutil.rmtree(run_dir)  # a previous attempt: start clean so metrics.jsonl holds this run only
        os.makedirs(run_dir)
        log_path = os.path.join(self.point_dir(point), "train.log")
        cmd = self.train_command(point)
        env = run_env(self.sweep.env)
        env["BUILD_DIR"] = self.build_dir
        limits = [t for t in (timeout_s, budget_timeout_s) if t]
        limit = min(limits) if limits else None
        start = time.time()
        tail = []
        with open(log_path, "w") as log:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            # Own session: a timeout stops the whole job with one killpg, and a Ctrl-C in the terminal reaches
            # only the driver (the ranks would take SIGINT as "save a checkpoint").
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.repo_root,
                                    preexec_fn=die_with_parent)

            def pump():
                for line in proc.stdout:
                    log.write(line)
                    log.flush()
                    tail.append(line)
                    del tail[:-200]
                    if self.verbose:
                        print("    | " + line, end="", flush=True)

            reader = threading.Thread(target=pump, daemon=True)
            reader.start()
            killed = False
            try:
                proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                killed = True
                stop_process_group(proc)
            except KeyboardInterrupt:
                stop_process_group(proc)
                reader.join(timeout=5)
                raise
            reader.join(timeout=30)
        seconds = time.time() - start
        if killed:
            by_budget = budget_timeout_s and (not timeout_s or budget_timeout_s < timeout_s)
            if by_budget:
                return "interrupted", f"stopped after {seconds:.0f} s by --time-budget; runs again on resume", seconds
            return "failed", f"timeout: still running after measure.timeout_s = {timeout_s:.0f} s", seconds
        if proc.returncode != 0:
            return "failed", error_from_output("".join(tail), proc.returncode), seconds
        records = self.records(point)
        if len(records) < point.steps:
            return "failed", (f"run exited 0 but {self.metrics_path(point)} holds {len(records)} of "
                              f"{point.steps} steps"), seconds
        if not self.sweep.keep_checkpoints:
            shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)
        return "done", "", seconds

    def metrics_path(self, point):
        """run_dir/<log.metrics_file> of the resolved config the trainer saved (metrics.jsonl by default)."""
        log = self.resolved_config(point).get("log")
        name = (log.get("metrics_file") if isinstance(log, dict) else None) or "metrics.jsonl"
        return os.path.join(self.run_dir(point), name)

    def records(self, point):
        path = self.metrics_path(point)
        return measure.read_step_records(path) if os.path.isfile(path) else []

    def resolved_config(self, point):
        """run_dir/config.yaml as written by the trainer; {} when absent or unreadable."""
        try:
            with open(os.path.join(self.run_dir(point), "config.yaml")) as f:
                data = yaml.safe_load(f)
            return data if isinstance(data, dict) else {}
        except (OSError, yaml.YAMLError):
            return {}


def die_with_parent():
    """In the child before exec: SIGTERM it (train.sh execs mpirun, which then stops its ranks) if the driver
    dies, e.g. killed by a job time limit, so that no run keeps the GPU busy unattended. Linux only."""
    try:
        import ctypes
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def stop_process_group(proc):
    """SIGTERM to the run's own process group, a second SIGTERM if it lingers, SIGKILL last. launch/train.sh runs
    mpirun in a session of its own and turns the first SIGTERM into "finish the step, save, stop" and the second
    into an immediate stop of mpirun and its ranks (a SIGKILL of train.sh would not reach them)."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
