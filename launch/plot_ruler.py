#!/usr/bin/env python3
"""The task x length heatmap of RULER-style scores (matplotlib), one panel per checkpoint.

  python3 launch/plot_ruler.py A.jsonl [B.jsonl ...] --out ruler.png [--labels a,b]

Each JSONL is what `ringtrain eval --task ruler --out A.jsonl` wrote: one line per case (task, length, score 0-100:
the share of the case's answers found in its greedy output). A cell is the mean over the cases of that (task,
length), printed in the cell; a task without cases at a length is left blank.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "sweep"))


def fail(msg):
    print(f"plot_ruler.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_grid(path):
    cells, tasks = {}, []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    task, length, score = str(r["task"]), int(r["length"]), float(r["score"])
                    if task not in tasks:
                        tasks.append(task)
                    cells.setdefault((task, length), []).append(score)
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"'{path}': {e}; give the .jsonl that `ringtrain eval --task ruler --out` wrote")
    if not cells:
        fail(f"'{path}' has no case")
    lengths = sorted({n for _, n in cells})
    grid = [[sum(cells[(t, n)]) / len(cells[(t, n)]) if (t, n) in cells else float("nan") for n in lengths]
            for t in tasks]
    return tasks, lengths, grid


def count_label(n):
    for div, unit in ((2**20, "M"), (2**10, "K")):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--labels", help="comma-separated, one per JSONL (default: the file names)")
    args = ap.parse_args()
    labels = args.labels.split(",") if args.labels else [os.path.splitext(os.path.basename(p))[0] for p in args.jsonl]
    if len(labels) != len(args.jsonl):
        fail(f"--labels has {len(labels)} names for {len(args.jsonl)} files")
    if not args.out.lower().endswith(".png"):
        fail(f"--out '{args.out}' must end in .png")
    grids = [read_grid(p) for p in args.jsonl]
    from matplotlib_python import ensure_matplotlib
    ensure_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = max(len(g[0]) for g in grids)
    fig, axes = plt.subplots(1, len(grids), figsize=(1.6 + 3.2 * len(grids), 1.2 + 0.4 * rows), squeeze=False,
                             constrained_layout=True)
    image = None
    for i, (ax, (tasks, lengths, grid), label) in enumerate(zip(axes[0], grids, labels)):
        image = ax.imshow(grid, vmin=0, vmax=100, cmap="RdYlGn", aspect="auto", origin="upper")
        for r, row in enumerate(grid):
            for c, v in enumerate(row):
                if v == v:  # not NaN
                    ax.text(c, r, f"{v:.0f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(lengths)), [count_label(n) for n in lengths], fontsize=7)
        ax.set_yticks(range(len(tasks)), tasks if i == 0 else [""] * len(tasks), fontsize=7)
        ax.set_xlabel("context length (tokens)")
        ax.set_title(label, fontsize=9)
    fig.colorbar(image, ax=axes[0].tolist(), label="string-match score (0-100)")
    fig.savefig(args.out, dpi=100)
    print(f"plot_ruler.py: wrote {args.out}")


if __name__ == "__main__":
    main()
