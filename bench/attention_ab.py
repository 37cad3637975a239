#!/usr/bin/env python3
"""A/B of two bench_attention binaries (e.g. before / after a change) in one job, interleaved cell by cell.

usage: python3 bench/attention_ab.py --a OLD/bench_attention --b NEW/bench_attention [--rounds 3]
           [--dims 64,128] [--lengths 1024,4096,16384,65536] [--warmup 2] [--reps 5] [--tolerance 3]
           [--out table.md]

For each round and each (d, N) cell it runs `bench_attention --no-ceilings --d d --n N` once per binary, the two
back to back (the order alternates by round), so both see the same clocks and the same thermal state. Per cell
and binary it takes the median over rounds of fwd and bwd TF/s (causal and not), prints a markdown table with
b / a - 1 per number, and marks every number whose difference exceeds --tolerance percent. Exit code 0 when
every number is within the tolerance, 3 otherwise (1 on a failed run). Needs only python3 and the binaries.
"""
import argparse
import statistics
import subprocess
import sys


def run(binary, d, n, warmup, reps):
    cmd = [binary, "--no-ceilings", "--d", str(d), "--n", str(n), "--warmup", str(warmup), "--reps", str(reps)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"attention_ab: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    rows = {}
    for line in out.stdout.splitlines():
        f = line.split()
        # d N B H causal fwd_ms fwd_tflops bwd_ms bwd_tflops
        if len(f) == 9 and f[0].isdigit() and f[4] in ("yes", "no"):
            rows[(int(f[0]), int(f[1]), f[4] == "yes")] = (float(f[6]), float(f[8]))
    if not rows:
        sys.exit(f"attention_ab: no result rows from {' '.join(cmd)}:\n{out.stdout}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="bench_attention binary A (before)")
    ap.add_argument("--b", required=True, help="bench_attention binary B (after)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--lengths", default="1024,4096,16384,65536")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tolerance", type=float, default=3.0, help="percent")
    ap.add_argument("--out", help="also write the table here")
    args = ap.parse_args()
    dims = [int(x) for x in args.dims.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    cells = [(d, n) for d in dims for n in lengths]
    samples = {"a": {}, "b": {}}  # binary -> (d, N, causal) -> list of (fwd, bwd)
    total = args.rounds * len(cells)
    done = 0
    for r in range(args.rounds):
        for d, n in cells:
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            for which in order:
                rows = run(getattr(args, which), d, n, args.warmup, args.reps)
                for key, v in rows.items():
                    samples[which].setdefault(key, []).append(v)
            done += 1
            print(f"[attention_ab] round {r + 1}/{args.rounds}, cell d={d} N={n} ({done}/{total})", file=sys.stderr,
                  flush=True)
    lines = [f"A: `{args.a}`, B: `{args.b}`; median of {args.rounds} interleaved rounds (order alternating), "
             f"bench_attention --warmup {args.warmup} --reps {args.reps}; TF/s; diff = B / A - 1; "
             f"`!` marks |diff| > {args.tolerance:g}%.", "",
             "| d | N | causal | fwd A | fwd B | fwd diff | bwd A | bwd B | bwd diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    worst, outside = 0.0, 0
    for key in sorted(samples["a"]):
        if key not in samples["b"]:
            continue
        a = [statistics.median(x[i] for x in samples["a"][key]) for i in range(2)]
        b = [statistics.median(x[i] for x in samples["b"][key]) for i in range(2)]
        cols = []
        for i in range(2):
            diff = 100.0 * (b[i] / a[i] - 1.0)
            worst = max(worst, abs(diff))
            mark = " !" if abs(diff) > args.tolerance else ""
            outside += 1 if mark else 0
            cols.append(f"{a[i]:.1f} | {b[i]:.1f} | {diff:+.1f}%{mark}")
        d, n, causal = key
        lines.append(f"| {d} | {n} | {'yes' if causal else 'no'} | {cols[0]} | {cols[1]} |")
    lines += ["", f"Largest |diff|: {worst:.1f}%; numbers outside ±{args.tolerance:g}%: {outside}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    sys.exit(0 if outside == 0 else 3)


if __name__ == "__main__":
    main()
