#!/usr/bin/env python3
"""The table of bench/doc_cp_e2e.sh: one row per parallel.cp_scheme run, from its metrics.jsonl.

  python3 bench/doc_cp_summary.py --out-dir OUT --run ring:0:41 --run gather:0:39 --run auto:1:12

Each --run is SCHEME:EXIT:SECONDS (the run's exit status and wall time); its step lines are read from
OUT/SCHEME/metrics.jsonl (lines with "tok_per_s"; the eval lines have none). Per run:
  median_ms_per_step, median_tok_per_s, median_attn_ms, median_comm_exposed_ms
                  medians over the logged steps after the first (the first step warms up: allocation, plans);
                  null with one step or none
  gather_share    the share of all logged steps that ran the gather scheme (cp_scheme_gather = 1; rank 0's ring)
  first_loss      the loss of the first logged step (same data and initialisation under every scheme)
  first_loss_rel_vs_ring  |first_loss - ring's| / |ring's| (the schemes are exact: float rounding only)
Writes OUT/summary.jsonl (one object per run, in --run order) and OUT/summary.md, and prints the table.
"""
import argparse
import json
import os
import statistics


def read_steps(path):
    """The step lines of a metrics.jsonl in step order (a missing or unreadable file: none)."""
    steps = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                row = json.loads(line)
                if "tok_per_s" in row:
                    steps.append(row)
    except (OSError, ValueError):
        return []
    steps.sort(key=lambda r: r["step"])
    return steps


def median_after_first(steps, key):
    values = [r[key] for r in steps[1:] if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize_run(scheme, exit_status, seconds, steps):
    gather = [r["cp_scheme_gather"] for r in steps if r.get("cp_scheme_gather") is not None]
    return {
        "scheme": scheme,
        "exit": exit_status,
        "wall_s": seconds,
        "steps_logged": len(steps),
        "median_ms_per_step": median_after_first(steps, "ms_per_step"),
        "median_tok_per_s": median_after_first(steps, "tok_per_s"),
        "median_attn_ms": median_after_first(steps, "attn_ms"),
        "median_comm_exposed_ms": median_after_first(steps, "comm_exposed_ms"),
        "gather_share": sum(gather) / len(gather) if gather else None,
        "first_loss": steps[0].get("loss") if steps else None,
    }


def add_loss_vs_ring(rows):
    ring = next((r["first_loss"] for r in rows if r["scheme"] == "ring"), None)
    for r in rows:
        loss = r["first_loss"]
        r["first_loss_rel_vs_ring"] = abs(loss - ring) / abs(ring) if loss is not None and ring else None


def cell(value, fmt):
    return "n/a" if value is None else format(value, fmt)


def markdown(rows, out_dir):
    lines = [
        f"# Packed documents per parallel.cp_scheme ({out_dir})",
        "",
        "Medians over the steps after the first; gather share over all steps; loss of the first step.",
        "",
        "| scheme | exit | wall s | steps | ms/step | tok/s | attn ms | comm exposed ms | gather share | "
        "first loss | vs ring |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['scheme']} | {r['exit']} | {r['wall_s']} | {r['steps_logged']} | "
            f"{cell(r['median_ms_per_step'], '.1f')} | {cell(r['median_tok_per_s'], '.0f')} | "
            f"{cell(r['median_attn_ms'], '.2f')} | {cell(r['median_comm_exposed_ms'], '.2f')} | "
            f"{cell(r['gather_share'], '.2f')} | {cell(r['first_loss'], '.6f')} | "
            f"{cell(r['first_loss_rel_vs_ring'], '.1e')} |")
    return "\n".join(lines) + "\n"


def parse_run(text):
    scheme, exit_status, seconds = text.split(":")
    return scheme, int(exit_status), int(seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--run", action="append", type=parse_run, required=True, help="SCHEME:EXIT:SECONDS")
    args = ap.parse_args()
    rows = [summarize_run(s, e, t, read_steps(os.path.join(args.out_dir, s, "metrics.jsonl"))) for s, e, t in args.run]
    add_loss_vs_ring(rows)
    with open(os.path.join(args.out_dir, "summary.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    table = markdown(rows, args.out_dir)
    with open(os.path.join(args.out_dir, "summary.md"), "w") as f:
        f.write(table)
    print(table, end="")


if __name__ == "__main__":
    main()
