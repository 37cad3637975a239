#!/usr/bin/env python3
"""The FP8 attention parity driver path end to end on the CPU (issue 47's second device call, --tiny).

  fp8_attention_parity_check.py --out DIR --steps N -- python3 bench/fp8_loss_parity.py ... --out DIR ...

Removes what an earlier run left in DIR (its reports, runs and evals; the prepared corpus stays, so the data stage is
not redone), runs the driver command after `--`, and fails unless: the driver exits 0; summary.md, results.json,
study.json and evals.md are written again; the one run is fp8-tensorwise-attention, status ok, trained to step N with
a finite held-out loss; its resolved config has train.precision fp8, fp8.recipe tensorwise and fp8.attention true;
the end-of-run evals wrote a loss-by-position row and passkey cases for it, finite, and evals.md names it.
"""
import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import sys

RUN = "fp8-tensorwise-attention"
STALE = ("summary.md", "results.json", "study.json", "evals.md", "loss_parity.png", "loss_by_position.png",
         "passkey.png", "runs", "eval", "logs")


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check(out, steps):
    """The list of failures (empty: the driver did what the test asks)."""
    fails = []
    for name in ("summary.md", "results.json", "study.json", "evals.md"):
        path = os.path.join(out, name)
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            fails.append(f"{name} not written")
    if fails:
        return fails
    rows = json.load(open(os.path.join(out, "results.json"))).get("rows", [])
    if [r.get("name") for r in rows] != [RUN]:
        fails.append(f"results.json rows {[r.get('name') for r in rows]}, expected [{RUN!r}]")
    for r in rows:
        if r.get("name") != RUN:
            continue
        if r.get("status") != "ok":
            fails.append(f"{RUN}: status {r.get('status')!r}")
        if r.get("final_step") != steps:
            fails.append(f"{RUN}: final step {r.get('final_step')}, expected {steps}")
        loss = r.get("final_eval")
        if not isinstance(loss, (int, float)) or not math.isfinite(loss) or loss <= 0:
            fails.append(f"{RUN}: final held-out loss {loss!r}")
    runs = json.load(open(os.path.join(out, "study.json"))).get("runs", [])
    entry = [r for r in runs if r.get("name") == RUN]
    if not entry or not entry[0].get("attention") or entry[0].get("precision") != "fp8":
        fails.append(f"study.json: no fp8 run with attention true named {RUN} ({runs})")
    config_path = os.path.join(out, "runs", RUN, "config.yaml")
    config = open(config_path).read() if os.path.isfile(config_path) else ""
    after = config.split("\nfp8:\n", 1)[1] if "\nfp8:\n" in config else ""  # the fp8 section: its indented lines
    fp8_keys = [line.strip() for line in itertools.takewhile(lambda l: l.startswith("  "), after.splitlines())]
    if 'precision: "fp8"' not in config or "attention: true" not in fp8_keys or 'recipe: "tensorwise"' not in fp8_keys:
        fails.append(f"{config_path}: not train.precision fp8 with fp8.recipe tensorwise and fp8.attention true")
    for kind, key in (("loss-by-position", "mean_loss"), ("needle", "accuracy")):
        path = os.path.join(out, "eval", f"{kind}-{RUN}.jsonl")
        rows = read_jsonl(path) if os.path.isfile(path) else []
        if not rows:
            fails.append(f"{path}: missing or empty")
        elif not all(isinstance(r.get(key), (int, float)) and math.isfinite(r[key]) for r in rows):
            fails.append(f"{path}: a {key} that is not a finite number")
    if RUN not in open(os.path.join(out, "evals.md")).read():
        fails.append(f"evals.md does not name {RUN}")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the driver's --out directory")
    ap.add_argument("--steps", type=int, required=True, help="the driver's --steps")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the driver command")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no driver command after --")
    for name in STALE:  # an earlier run's outputs must not pass for this run's
        path = os.path.join(args.out, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    print("$ " + " ".join(command), flush=True)
    rc = subprocess.call(command)
    fails = [f"the driver exited {rc}"] if rc != 0 else check(args.out, args.steps)
    for f in fails:
        print("FAIL: " + f)
    if not fails:
        print(f"fp8 attention parity (tiny): {RUN} trained {args.steps} steps, report and evals written")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
