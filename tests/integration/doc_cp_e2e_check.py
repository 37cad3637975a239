#!/usr/bin/env python3
"""Checks the output of bench/doc_cp_e2e.sh (tests/integration/doc_cp_e2e.sh runs it on CPU ranks).

  python3 tests/integration/doc_cp_e2e_check.py OUT --steps N [--negative-controls]

Passes when summary.jsonl holds exactly the schemes ring, gather and auto, each with exit 0 and N logged steps, and
every run's metrics.jsonl agrees:
  - every step trained on packed documents (boundary_targets_dropped > 0: several documents per sample);
  - cp_scheme_gather is 0 in every step of ring, 1 in every step of gather, 0 or 1 in auto's; the summary's
    gather_share is their mean;
  - the first step's loss is finite and equal under the three schemes within 1e-4 relative (same data, same
    initialisation; the schemes are exact), and the summary's first_loss is that step's loss;
  - the summary's timing medians are present (N > 1).
--negative-controls then breaks copies of the output one way at a time (a scheme's first loss off by 1e-3
relative, a run with exit 1, a ring step that ran the gather, a missing scheme), rebuilds the summary with
bench/doc_cp_summary.py, and requires the check to fail for that reason.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

SCHEMES = ("ring", "gather", "auto")
LOSS_RTOL = 1e-4
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check(out_dir, steps):
    """The problems found in bench/doc_cp_e2e.sh's output (empty: it passes)."""
    problems = []
    summary_path = os.path.join(out_dir, "summary.jsonl")
    if not os.path.exists(summary_path):
        return [f"no {summary_path}"]
    rows = {r["scheme"]: r for r in read_jsonl(summary_path)}
    if sorted(rows) != sorted(SCHEMES):
        problems.append(f"scheme: the summary has {sorted(rows)}, not {sorted(SCHEMES)}")
    first_losses = {}
    for scheme in SCHEMES:
        row = rows.get(scheme)
        if row is None:
            continue
        if row["exit"] != 0:
            problems.append(f"exit: the {scheme} run exited with {row['exit']}")
        metrics = os.path.join(out_dir, scheme, "metrics.jsonl")
        lines = [r for r in read_jsonl(metrics) if "tok_per_s" in r] if os.path.exists(metrics) else []
        if len(lines) != steps or row["steps_logged"] != steps:
            problems.append(f"steps: {scheme} logged {len(lines)} steps ({row['steps_logged']} in the summary), "
                            f"not {steps}")
        if not lines:
            continue
        gather = [r.get("cp_scheme_gather") for r in lines]
        want = {"ring": {0}, "gather": {1}, "auto": {0, 1}}[scheme]
        if not set(gather) <= want:
            problems.append(f"gather: {scheme}'s steps ran cp_scheme_gather {gather}, each must be in {sorted(want)}")
        elif row["gather_share"] is None or abs(row["gather_share"] - sum(gather) / len(gather)) > 1e-12:
            problems.append(f"gather: {scheme}'s summary gather_share {row['gather_share']}, its steps {gather}")
        dropped = [r.get("boundary_targets_dropped") or 0 for r in lines]
        if min(dropped) <= 0:
            problems.append(f"documents: {scheme}'s steps dropped {dropped} boundary targets: no document boundary")
        loss = lines[0].get("loss")
        if loss is None or not math.isfinite(loss):
            problems.append(f"loss: {scheme}'s first step has loss {loss}")
            continue
        if row["first_loss"] != loss:
            problems.append(f"loss: {scheme}'s summary first_loss {row['first_loss']}, its first step {loss}")
        first_losses[scheme] = loss
        for key in ("median_ms_per_step", "median_tok_per_s", "median_attn_ms", "median_comm_exposed_ms"):
            if steps > 1 and row.get(key) is None:
                problems.append(f"median: {scheme}'s summary has no {key}")
    if "ring" in first_losses:
        ring = first_losses["ring"]
        for scheme, loss in first_losses.items():
            if abs(loss - ring) > LOSS_RTOL * abs(ring):
                problems.append(f"loss: {scheme}'s first loss {loss!r} differs from ring's {ring!r} by "
                                f"{abs(loss - ring) / abs(ring):.2e} relative (> {LOSS_RTOL:g})")
    return problems


def rebuild_summary(out_dir, runs):
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "doc_cp_summary.py"), "--out-dir", out_dir] +
                   [a for r in runs for a in ("--run", f"{r['scheme']}:{r['exit']}:{r['wall_s']}")],
                   check=True, stdout=subprocess.DEVNULL)


def rewrite_metrics(out_dir, scheme, edit):
    path = os.path.join(out_dir, scheme, "metrics.jsonl")
    lines = read_jsonl(path)
    edit([r for r in lines if "tok_per_s" in r])
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in lines))


def negative_controls(out_dir, steps):
    """Each breakage of a copy of the output must make check() report it (by the problem's first word)."""
    runs = read_jsonl(os.path.join(out_dir, "summary.jsonl"))

    def loss_off(d, rs):
        rewrite_metrics(d, "gather", lambda ls: ls[0].update(loss=ls[0]["loss"] * (1 + 1e-3)))
        return rs

    def run_failed(d, rs):
        return [dict(r, exit=1) if r["scheme"] == "auto" else r for r in rs]

    def ring_gathered(d, rs):
        rewrite_metrics(d, "ring", lambda ls: ls[-1].update(cp_scheme_gather=1.0))
        return rs

    def scheme_missing(d, rs):
        return [r for r in rs if r["scheme"] != "gather"]

    controls = [("a first loss 1e-3 off", loss_off, "loss"), ("a failed run", run_failed, "exit"),
                ("a ring step that gathered", ring_gathered, "gather"), ("no gather run", scheme_missing, "scheme")]
    failures = 0
    for name, breakage, word in controls:
        with tempfile.TemporaryDirectory() as tmp:
            for scheme in SCHEMES:
                os.makedirs(os.path.join(tmp, scheme))
                shutil.copy(os.path.join(out_dir, scheme, "metrics.jsonl"), os.path.join(tmp, scheme))
            rebuild_summary(tmp, breakage(tmp, runs))
            found = check(tmp, steps)
        caught = any(p.startswith(word + ":") for p in found)
        print(f"negative control ({name}): {'caught' if caught else 'NOT caught'}: {found}")
        failures += not caught
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--negative-controls", action="store_true")
    args = ap.parse_args()
    problems = check(args.out_dir, args.steps)
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        return 1
    for r in read_jsonl(os.path.join(args.out_dir, "summary.jsonl")):
        print(f"{r['scheme']}: first loss {r['first_loss']!r} ({r['first_loss_rel_vs_ring']:.1e} vs ring), gather "
              f"share {r['gather_share']:.2f}, {r['median_ms_per_step']:.1f} ms/step")
    if args.negative_controls and negative_controls(args.out_dir, args.steps):
        print("FAIL: a negative control was not caught")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
