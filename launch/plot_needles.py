#!/usr/bin/env python3
"""The depth x length heatmap of needle scores (matplotlib), one panel per checkpoint.

  python3 launch/plot_needles.py A.jsonl [B.jsonl ...] --out needles.png [--labels a,b] [--metric accuracy]

Each JSONL is what `ringtrain eval --task needle --out A.jsonl` wrote: one line per case (length, depth,
accuracy = the share of answer tokens whose argmax is right, exact, mean_logprob). A cell is the mean over the
cases of that (depth, length); --metric exact counts a case only when every answer token is right.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "sweep"))
from image_output import check_image_out, save_figure  # noqa: E402  (launch/image_output.py: the --out rule)


def fail(msg):
    print(f"plot_needles.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_grid(path, metric):
    cells = {}
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    value = float(r[metric])
                    cells.setdefault((float(r["depth"]), int(r["length"])), []).append(value)
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"'{path}': {e}; give the .jsonl that `ringtrain eval --task needle --out` wrote")
    if not cells:
        fail(f"'{path}' has no case")
    depths = sorted({d for d, _ in cells})
    lengths = sorted({n for _, n in cells})
    grid = [[sum(cells[(d, n)]) / len(cells[(d, n)]) if (d, n) in cells else float("nan") for n in lengths]
            for d in depths]
    return depths, lengths, grid


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
    ap.add_argument("--metric", choices=["accuracy", "exact"], default="accuracy")
    args = ap.parse_args()
    labels = args.labels.split(",") if args.labels else [os.path.splitext(os.path.basename(p))[0] for p in args.jsonl]
    if len(labels) != len(args.jsonl):
        fail(f"--labels has {len(labels)} names for {len(args.jsonl)} files")
    check_image_out("plot_needles.py", args.out)
    from matplotlib_python import ensure_matplotlib
    ensure_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(args.jsonl), figsize=(1.2 + 3.0 * len(args.jsonl), 3.4), squeeze=False,
                             constrained_layout=True)
    image = None
    for i, (ax, path, label) in enumerate(zip(axes[0], args.jsonl, labels)):
        depths, lengths, grid = read_grid(path, args.metric)
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="upper")
        ax.set_xticks(range(len(lengths)), [count_label(n) for n in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{100 * d:.0f}%" for d in depths], fontsize=7)
        ax.set_xlabel("context length (tokens)")
        if i == 0:
            ax.set_ylabel("needle depth")
        ax.set_title(label, fontsize=9)
    fig.colorbar(image, ax=axes[0].tolist(), label=f"answer {args.metric}")
    save_figure("plot_needles.py", fig, args.out, dpi=100)
    print(f"plot_needles.py: wrote {args.out}")


if __name__ == "__main__":
    main()
