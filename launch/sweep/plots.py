"""PNG plots of a sweep's rows (the dicts behind results.csv), with matplotlib (python3-matplotlib).

- throughput_vs_context.png: tok/s against data.seq_len, one line per combination of the other swept keys.
- scaling_efficiency.png: strong- and weak-scaling efficiency against cp.
- comm_exposed_share.png: exposed communication time / step time against cp (or seq_len).
- memory_vs_context.png: measured peak memory per rank (solid) and the plan's prediction (dashed) against
  seq_len (or cp), with the device limit.
A plot whose x-axis key does not vary, or whose data is absent, is not drawn; make_plots says why.
"""
import os


def _series_key(row, keys):
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={row.get(k)}" for k in keys)


def _series(rows, x, sweep, value):
    """{label: [(x, y), ...]} sorted by x; series split by the swept keys other than x (and its zip partners)."""
    axis = _axis_key(x)
    drop = {axis} | set(sweep.zipped_with(axis))
    keys = [k for k in sweep.swept_keys() if k not in drop]
    out = {}
    for r in rows:
        y = value(r)
        xv = r.get(x)
        if y is None or xv is None:
            continue
        out.setdefault(_series_key(r, keys), []).append((float(xv), float(y)))
    return {k: sorted(v) for k, v in out.items()}


def _axis_key(column):
    return {"seq_len": "data.seq_len", "cp": "parallel.cp"}.get(column, column)


def _varies(rows, column):
    return len({r.get(column) for r in rows if r.get(column) is not None}) > 1


def _count_label(x, _pos=None):
    """16384 -> 16K, 524288 -> 512K, 4 -> 4."""
    for div, unit in ((2**30, "G"), (2**20, "M"), (2**10, "K")):
        if x >= div and x % div == 0:
            return f"{int(x // div)}{unit}"
    return f"{x:g}"


def _log2_axis(ax):
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(FuncFormatter(_count_label))


def _setup(plt, title, label, xlabel, ylabel, log2x):
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_title(title if not label else f"{title}\n{label}", fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if log2x:
        _log2_axis(ax)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig, ax, path):
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def make_plots(rows, sweep, out_dir):
    """Writes the PNGs; returns (written paths, notes about plots not drawn)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    done = [r for r in rows if r["status"] == "done"]
    label = sweep.label
    written, notes = [], []

    # Throughput vs context length.
    if _varies(done, "seq_len"):
        fig, ax = _setup(plt, f"{sweep.name}: throughput vs context length", label, "context length (tokens)",
                         "tokens / s", True)
        for name, pts in _series(done, "seq_len", sweep, lambda r: r["tok_per_s"]).items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name or "tok/s")
        path = os.path.join(out_dir, "throughput_vs_context.png")
        _save(fig, ax, path)
        plt.close(fig)
        written.append(path)
    else:
        notes.append("throughput_vs_context: data.seq_len does not vary among finished points")

    # Scaling efficiency vs cp.
    have_strong = any(r.get("strong_scaling_eff") is not None for r in done)
    have_weak = any(r.get("weak_scaling_eff") is not None for r in done)
    if have_strong or have_weak:
        fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
        fig.suptitle(f"{sweep.name}: scaling efficiency vs cp" + (f"\n{label}" if label else ""), fontsize=10)
        for ax, column, title in ((axes[0], "strong_scaling_eff", "strong (fixed context length)"),
                                  (axes[1], "weak_scaling_eff", "weak (fixed tokens per rank)")):
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("cp (ranks in the ring)")
            _log2_axis(ax)
            ax.grid(True, alpha=0.3)
            ax.axhline(1.0, color="gray", linestyle=":", linewidth=1)
            rows_ = [r for r in done if r.get(column) is not None]
            if not rows_:
                ax.text(0.5, 0.5, "no group with two cp values", transform=ax.transAxes, ha="center")
                continue
            if column == "strong_scaling_eff":
                group_keys = [k for k in sweep.swept_keys() if k != "parallel.cp"]
                key = lambda r: _series_key(r, group_keys) or f"seq_len={r['seq_len']}"
            else:
                group_keys = [k for k in sweep.swept_keys() if k not in ("parallel.cp", "data.seq_len")]
                key = lambda r: ", ".join(x for x in (_series_key(r, group_keys),
                                                      f"{r['seq_len'] // r['cp']} tok/rank") if x)
            groups = {}
            for r in rows_:
                groups.setdefault(key(r), []).append((r["cp"], r[column]))
            for name, pts in groups.items():
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
            ax.legend(fontsize=8)
        axes[0].set_ylabel("efficiency (1 = ideal)")
        fig.tight_layout()
        path = os.path.join(out_dir, "scaling_efficiency.png")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    else:
        notes.append("scaling_efficiency: no two finished points differ only in parallel.cp")

    # Exposed communication share.
    comm = [r for r in done if r.get("comm_exposed_share") is not None]
    x = "cp" if _varies(comm, "cp") else "seq_len"
    if comm and _varies(comm, x):
        fig, ax = _setup(plt, f"{sweep.name}: exposed communication share of the step", label,
                         "cp (ranks in the ring)" if x == "cp" else "context length (tokens)",
                         "exposed comm / step time (%)", True)
        for name, pts in _series(comm, x, sweep, lambda r: 100.0 * r["comm_exposed_share"]).items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name or "exposed comm")
        path = os.path.join(out_dir, "comm_exposed_share.png")
        _save(fig, ax, path)
        plt.close(fig)
        written.append(path)
    else:
        notes.append("comm_exposed_share: the metrics hold no comm_exposed_ms (or neither cp nor seq_len varies)")

    # Memory vs context, measured and planned (skipped points show their prediction). The plan's total is the
    # arena plus its stated allowance for what the arena does not hold (CUDA context, cuBLASLt workspace).
    def plan_total(r):
        return r.get("plan_total_gib") if r.get("plan_total_gib") is not None else r.get("plan_peak_gib")
    planned = [r for r in rows if plan_total(r) is not None]
    x = "seq_len" if _varies(planned, "seq_len") else "cp"
    if _varies(planned, x):
        fig, ax = _setup(plt, f"{sweep.name}: peak memory per rank, measured and planned", label,
                         "context length (tokens)" if x == "seq_len" else "cp (ranks in the ring)", "GiB", True)
        measured = _series(done, x, sweep, lambda r: r.get("peak_mem_gib"))
        predicted = _series(planned, x, sweep, plan_total)
        colors = {}
        for name, pts in measured.items():
            line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{name} measured".strip())
            colors[name] = line[0].get_color()
        for name, pts in predicted.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="--", marker="x", color=colors.get(name),
                    label=f"{name} plan (arena + allowance)".strip())
        if sweep.device_memory_bytes:
            ax.axhline(sweep.device_memory_bytes / 2.0**30, color="red", linestyle=":", linewidth=1,
                       label="device memory")
        path = os.path.join(out_dir, "memory_vs_context.png")
        _save(fig, ax, path)
        plt.close(fig)
        written.append(path)
    else:
        notes.append("memory_vs_context: neither seq_len nor cp varies")
    return written, notes
