#!/usr/bin/env python3
"""Loss by position of one or more checkpoints, as one PNG (matplotlib).

  python3 launch/plot_loss_by_position.py A.jsonl [B.jsonl ...] --out loss_by_position.png [--labels a,b]

Each JSONL is what `ringtrain eval --task loss-by-position --out A.jsonl` wrote: one line per position bucket
(lo, hi, targets, mean_loss). The x axis (log2) counts the tokens a prediction has seen, position + 1: bucket
[lo, hi) spans lo+1 .. hi and is drawn at their geometric middle. The y axis is the mean loss of the targets
predicted there: a curve that keeps falling to the right uses its far context. Labels default to the file names.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "sweep"))
from plots import _log2_axis  # noqa: E402  (the sweep plots' axis: powers of two as 1K, 64K, ...)
from image_output import check_image_out, save_figure  # noqa: E402  (launch/image_output.py: the --out rule)


def fail(msg):
    print(f"plot_loss_by_position.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_buckets(path):
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    r = json.loads(line)
                    rows.append((float(r["lo"]), float(r["hi"]), float(r["mean_loss"])))
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"'{path}': {e}; give the .jsonl that `ringtrain eval --task loss-by-position --out` wrote")
    if not rows:
        fail(f"'{path}' has no bucket")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--labels", help="comma-separated, one per JSONL (default: the file names)")
    ap.add_argument("--title", default="Held-out loss by position")
    args = ap.parse_args()
    labels = args.labels.split(",") if args.labels else [os.path.splitext(os.path.basename(p))[0] for p in args.jsonl]
    if len(labels) != len(args.jsonl):
        fail(f"--labels has {len(labels)} names for {len(args.jsonl)} files")
    check_image_out("plot_loss_by_position.py", args.out)
    from matplotlib_python import ensure_matplotlib
    ensure_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for path, label in zip(args.jsonl, labels):
        rows = read_buckets(path)
        xs = [math.sqrt((lo + 1) * hi) for lo, hi, _ in rows]
        ax.plot(xs, [y for _, _, y in rows], marker="o", markersize=3, label=label)
    _log2_axis(ax)
    ax.set_xlabel("tokens of context seen (position + 1)")
    ax.set_ylabel("mean loss (nats/token)")
    ax.set_title(args.title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure("plot_loss_by_position.py", fig, args.out, dpi=100)
    print(f"plot_loss_by_position.py: wrote {args.out}")


if __name__ == "__main__":
    main()
