#!/usr/bin/env python3
"""A training shard truncated under a running job (issue 43, row 5): configs/tiny.yaml on a uint16 llm.c shard of
copy-task-sized tokens, on 1 and 2 CPU ranks, checkpointing every 5 steps; once the first checkpoint exists the
shard is cut to a tenth. The job must end within a minute with exit 2 and an error naming the shard and the byte
offset of the failed read (never SIGBUS, exit 135); its last checkpoint must stay complete and loadable
(`ringtrain generate` runs on it).

  shard_changed.py --ringtrain BIN --mpirun MPIRUN --source-dir ROOT
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time

failures = []
TOKENS = 400_000  # ~0.8 MB of uint16


def check(cond, what, output=""):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
        if output:
            print("      " + output.strip().replace("\n", "\n      ")[-4000:], flush=True)


def write_shard(path):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, TOKENS  # llm.c: magic, version, token count
    tokens = [(i * 7919) % 31 for i in range(TOKENS)]  # ids in [0, 31): model.vocab_size 32
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{TOKENS}H", *tokens))


def one_job(args, tmp, ranks):
    shard = os.path.join(tmp, f"train_{ranks}.bin")
    write_shard(shard)
    run = os.path.join(tmp, f"run_{ranks}")
    config = os.path.join(args.source_dir, "configs", "tiny.yaml")
    cmd = [args.ringtrain, "train", config, "--set", "device=cpu", "--set", "data.source=shards",
           "--set", f"data.path={shard}", "--set", "train.steps=100000", "--set", "train.eval_every=0",
           "--set", "checkpoint.every=5", "--set", "log.every=5", "--set", f"train.run_dir={run}",
           "--set", f"parallel.cp={ranks}"]
    if ranks > 1:
        cmd = [args.mpirun, "-np", str(ranks), "--oversubscribe"] + cmd
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    log_path = os.path.join(tmp, f"train_{ranks}.log")
    with open(log_path, "w") as log:
        job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        checkpoints = os.path.join(run, "checkpoints", "main")
        deadline = time.time() + 90
        while time.time() < deadline and job.poll() is None:
            if os.path.isdir(checkpoints) and any(d.startswith("step_") for d in os.listdir(checkpoints)):
                break
            time.sleep(0.05)
        started = job.poll() is None
        with open(shard, "r+b") as f:
            f.truncate(1024 + TOKENS // 5)  # the header and a tenth of the tokens
        try:
            code = job.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)
            code = job.wait()
    out = open(log_path).read()
    check(started, f"{ranks} rank(s): the job was still training when the shard was cut", out)
    check(code == 2, f"{ranks} rank(s): the job ends with exit 2 (got {code}; 135 is SIGBUS)", out)
    named = [line for line in out.splitlines() if shard in line and "byte offset" in line]
    check(named, f"{ranks} rank(s): an error names the shard and the byte offset", out)
    check("Bus error" not in out and "signal 7" not in out.lower(), f"{ranks} rank(s): no SIGBUS", out)
    steps = sorted((d for d in os.listdir(checkpoints) if d.startswith("step_")), key=lambda d: int(d[5:]))
    last = os.path.join(checkpoints, steps[-1]) if steps else ""
    complete = bool(last) and all(os.path.isfile(os.path.join(last, f)) for f in ("model.safetensors", "state.json"))
    check(complete, f"{ranks} rank(s): the last checkpoint ({last}) is complete")
    if complete:
        g = subprocess.run([args.ringtrain, "generate", config, "--set", "device=cpu", "--checkpoint", last,
                            "--prompt", "1,2,3", "--max-new-tokens", "2"], capture_output=True, text=True, env=env)
        check(g.returncode == 0, f"{ranks} rank(s): the last checkpoint loads (generate on it)", g.stdout + g.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringtrain", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rt_shard_changed_") as tmp:
        for ranks in (1, 2):
            one_job(args, tmp, ranks)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
