#!/usr/bin/env python3
"""The report of the FP8 loss-parity study (bench/fp8_loss_parity.py): reads OUT/study.json and each run's
metrics.jsonl, compares every FP8 run with the bf16 one and writes OUT/summary.md, OUT/loss_parity.png and
OUT/results.json.

  python3 bench/fp8_parity_report.py OUT        # redraw from a study's directory (the driver calls this itself)
  python3 bench/fp8_parity_report.py --self-test  # the comparison and the summary on made-up metrics (ctest)

What is compared: the held-out (eval) loss at the last eval step that every run reached (normally the final step),
as (fp8 - bf16) / bf16; a recipe passes when |gap| <= the tolerance (0.5%). Also the largest gap over the eval
curve and over the smoothed training curve (a trailing mean of `window` steps, the first 10% of steps left out:
warm-up losses fall so fast there that a step's delay is a large relative gap).
"""
import json
import os
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "launch"))
sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "launch", "sweep"))
REFERENCE = "bf16"
TRAIN_GAP_SKIP = 0.10  # the first 10% of steps are left out of the smoothed-train gap


def read_metrics(path):
    """metrics.jsonl -> dict(train={step: loss}, evals={step: loss}, ms=[ms_per_step...]); a later line of a step
    replaces an earlier one. A missing file reads as empty."""
    out = dict(train={}, evals={}, ms=[])
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                m = json.loads(line)
            except ValueError:  # a line cut by a kill
                continue
            step = m.get("step")
            if step is None:
                continue
            if m.get("loss") is not None and "eval_windows" not in m:
                out["train"][int(step)] = float(m["loss"])
                if m.get("ms_per_step"):
                    out["ms"].append(float(m["ms_per_step"]))
            if m.get("eval_loss") is not None:
                out["evals"][int(step)] = float(m["eval_loss"])
    return out


def smooth(points, window):
    """[(step, loss)] sorted by step -> the trailing mean over `window` points, same steps."""
    out, total, q = [], 0.0, []
    for step, v in points:
        q.append(v)
        total += v
        if len(q) > window:
            total -= q.pop(0)
        out.append((step, total / len(q)))
    return out


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if v else None


def largest_gap(ref, other, steps):
    """The (step, relative gap) of largest |gap| over `steps`, or (None, None)."""
    best = (None, None)
    for s in steps:
        g = (other[s] - ref[s]) / ref[s]
        if best[1] is None or abs(g) > abs(best[1]):
            best = (s, g)
    return best


def compare(runs, tolerance, window):
    """runs: [dict(name, metrics, status)] with the bf16 run named REFERENCE. Returns (rows, final_step, notes):
    a row per run with its final eval loss, and per FP8 run its gaps and verdict."""
    ref = next((r for r in runs if r["name"] == REFERENCE), None)
    notes = []
    done = [r for r in runs if r["metrics"]["evals"]]
    common = set.intersection(*[set(r["metrics"]["evals"]) for r in done]) if done else set()
    final = max(common) if common else None
    if ref is None or not ref["metrics"]["evals"]:
        notes.append("the bf16 run has no eval loss: nothing to compare against")
    rows = []
    for r in runs:
        m = r["metrics"]
        row = dict(name=r["name"], status=r.get("status", ""), steps=max(m["train"]) if m["train"] else 0,
                   final_step=final, final_eval=m["evals"].get(final) if final else None,
                   ms_per_step=median(m["ms"][1:] or m["ms"]), gap=None, within=None,
                   max_eval_gap=(None, None), max_train_gap=(None, None))
        if r is not ref and ref is not None and final is not None and row["final_eval"] is not None:
            re, rt = ref["metrics"]["evals"], ref["metrics"]["train"]
            row["gap"] = (row["final_eval"] - re[final]) / re[final]
            row["within"] = abs(row["gap"]) <= tolerance
            row["max_eval_gap"] = largest_gap(re, m["evals"], sorted(common))
            a, b = dict(smooth(sorted(rt.items()), window)), dict(smooth(sorted(m["train"].items()), window))
            last = max(set(a) & set(b)) if set(a) & set(b) else 0
            steps = sorted(s for s in set(a) & set(b) if s > TRAIN_GAP_SKIP * last)
            row["max_train_gap"] = largest_gap(a, b, steps)
        rows.append(row)
    if final is not None and any(r["steps"] > final for r in rows):
        notes.append(f"compared at step {final}, the last eval step every run reached")
    return rows, final, notes


def pct(g):
    return "" if g is None else f"{100 * g:+.2f}%"


def summary_markdown(meta, rows, final, notes, tolerance):
    L = [f"# FP8 loss parity: {meta.get('model', '')}, bf16 against each FP8 recipe", "",
         f"- date: {meta.get('date', '')}", f"- GPU: {meta.get('gpu', '')}", f"- commit: {meta.get('commit', '')}",
         f"- command: `{meta.get('command', '')}`"]
    for key in ("config", "data", "setup"):
        if meta.get(key):
            L.append(f"- {key}: {meta[key]}")
    L += ["", f"Goal: each recipe's final held-out loss within {100 * tolerance:.1f}% (relative) of bf16's."]
    L += [f"Note: {n}." for n in notes]
    fp8 = [r for r in rows if r["name"] != REFERENCE]
    judged = [r for r in fp8 if r["within"] is not None]
    if judged:
        ok = sum(r["within"] for r in judged)
        L += ["", f"**{ok} of {len(fp8)} recipes within {100 * tolerance:.1f}%**" +
              ("" if len(judged) == len(fp8) else f" ({len(fp8) - len(judged)} not judged: no eval loss)")]
    L += ["", f"| run | steps | held-out loss at step {final} | gap to bf16 | within {100 * tolerance:.1f}% | "
          "largest eval gap (step) | largest smoothed-train gap (step) | median ms/step | status |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "" if r["within"] is None else ("**pass**" if r["within"] else "**FAIL**")
        eg, tg = r["max_eval_gap"], r["max_train_gap"]
        L.append(f"| {r['name']} | {r['steps']} | "
                 f"{'' if r['final_eval'] is None else format(r['final_eval'], '.4f')} | {pct(r['gap'])} | {verdict} | "
                 f"{pct(eg[1])}{'' if eg[0] is None else f' ({eg[0]})'} | "
                 f"{pct(tg[1])}{'' if tg[0] is None else f' ({tg[0]})'} | "
                 f"{'' if r['ms_per_step'] is None else format(r['ms_per_step'], '.1f')} | {r['status']} |")
    L += ["", f"Gap: (fp8 - bf16) / bf16, positive when FP8 is worse. The smoothed-train gap compares trailing means "
              f"of {meta.get('window', '?')} steps, leaving out the first {int(100 * TRAIN_GAP_SKIP)}% of steps."]
    return "\n".join(L) + "\n"


def eval_table(runs):
    steps = sorted(set().union(*[set(r["metrics"]["evals"]) for r in runs])) if runs else []
    L = ["", "Held-out loss by step:", "", "| step | " + " | ".join(r["name"] for r in runs) + " |",
         "|---|" + "---|" * len(runs)]
    for s in steps:
        L.append(f"| {s} | " + " | ".join(format(r["metrics"]["evals"][s], ".4f") if s in r["metrics"]["evals"]
                                          else "" for r in runs) + " |")
    return "\n".join(L) + "\n"


def plot(runs, rows, tolerance, window, out, title):
    from matplotlib_python import ensure_matplotlib
    ensure_matplotlib()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from image_output import save_figure
    fig, (ax_train, ax_eval, ax_gap) = plt.subplots(1, 3, figsize=(16, 4.6))
    colors = {REFERENCE: "black"}
    ref = next((r for r in runs if r["name"] == REFERENCE), None)
    lows, highs = [], []
    for i, r in enumerate(runs):
        color = colors.get(r["name"], f"C{i}")
        colors[r["name"]] = color
        sm = smooth(sorted(r["metrics"]["train"].items()), window)
        if sm:
            ax_train.plot([s for s, _ in sm], [v for _, v in sm], color=color, lw=1.2, label=r["name"])
            tail = [v for s, v in sm if s > TRAIN_GAP_SKIP * sm[-1][0]]
            lows.append(min(tail or [sm[-1][1]]))
            highs.append(max(tail or [sm[-1][1]]))
        ev = sorted(r["metrics"]["evals"].items())
        if ev:
            ax_eval.plot([s for s, _ in ev], [v for _, v in ev], color=color, marker="o", ms=3, label=r["name"])
    if lows:
        pad = 0.05 * (max(highs) - min(lows) or 1)
        ax_train.set_ylim(min(lows) - pad, max(highs) + pad)
    ax_train.set(title=f"training loss (trailing mean of {window} steps)", xlabel="step", ylabel="loss")
    ax_eval.set(title="held-out loss", xlabel="step", ylabel="loss")
    ax_gap.axhspan(-100 * tolerance, 100 * tolerance, color="green", alpha=0.08,
                   label=f"±{100 * tolerance:.1f}%")
    ax_gap.axhline(0, color="black", lw=0.8)
    if ref is not None:
        rt = dict(smooth(sorted(ref["metrics"]["train"].items()), window))
        re = ref["metrics"]["evals"]
        for k, (r, row) in enumerate(zip(runs, rows)):
            if r is ref:
                continue
            color = colors[r["name"]]
            mt = dict(smooth(sorted(r["metrics"]["train"].items()), window))
            steps = sorted(s for s in set(rt) & set(mt) if s > TRAIN_GAP_SKIP * max(set(rt) | {0}))
            ax_gap.plot(steps, [100 * (mt[s] - rt[s]) / rt[s] for s in steps], color=color, lw=0.9, alpha=0.6)
            es = sorted(set(re) & set(r["metrics"]["evals"]))
            ax_gap.plot(es, [100 * (r["metrics"]["evals"][s] - re[s]) / re[s] for s in es], color=color, marker="o",
                        ms=4, label=f"{r['name']} (eval: markers)")
            s, g = row["max_eval_gap"]
            if s is not None:
                ax_gap.annotate(f"{100 * g:+.2f}% @ {s}", (s, 100 * g), textcoords="offset points", xytext=(6, 4 + 11 * k),
                                color=color, fontsize=8, arrowprops=dict(arrowstyle="-", color=color, lw=0.6))
    ax_gap.set(title="gap to bf16, % ((fp8 - bf16) / bf16)", xlabel="step", ylabel="%")
    for ax in (ax_train, ax_eval, ax_gap):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure("fp8_parity_report.py", fig, out, dpi=120)
    plt.close(fig)


def report(out_dir, quiet=False, draw=True):
    """Reads OUT/study.json and the runs' metrics, writes summary.md, results.json and loss_parity.png. Returns
    the summary text."""
    study = json.load(open(os.path.join(out_dir, "study.json")))
    meta, tol, window = study["meta"], study["meta"]["tolerance"], study["meta"]["window"]
    runs = [dict(r, metrics=read_metrics(os.path.join(out_dir, "runs", r["name"], "metrics.jsonl")))
            for r in study["runs"]]
    rows, final, notes = compare(runs, tol, window)
    text = summary_markdown(meta, rows, final, notes, tol)
    if draw and any(r["metrics"]["train"] for r in runs):
        plot(runs, rows, tol, window, os.path.join(out_dir, "loss_parity.png"),
             f"FP8 loss parity: {meta.get('model', '')}")
        text += "\n![curves](loss_parity.png)\n"
    text += eval_table(runs)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(dict(meta=meta, final_step=final, notes=notes, rows=rows), f, indent=1)
    if not quiet:
        print(text)
    return text


def self_test():
    """Made-up runs: bf16, a recipe 0.2% off (pass), one 1% off (fail), one that stopped early (compared at the
    last common eval step), one with no metrics."""
    def fake(path, scale, steps, evals_every=5):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            for s in range(1, steps + 1):
                f.write(json.dumps(dict(step=s, loss=scale * (3 + 5 / s), ms_per_step=50.0 + s % 3)) + "\n")
                if s % evals_every == 0 or s == steps:
                    f.write(json.dumps(dict(step=s, eval_loss=scale * (3.1 + 5 / s), eval_windows=4)) + "\n")
            f.write('{"step": 7, "loss"')  # a line cut by a kill is skipped
    problems = []

    def check(cond, what):
        if not cond:
            problems.append(what)
    with tempfile.TemporaryDirectory() as d:
        fake(os.path.join(d, "runs", "bf16", "metrics.jsonl"), 1.0, 40)
        fake(os.path.join(d, "runs", "fp8-tensorwise", "metrics.jsonl"), 1.002, 40)
        fake(os.path.join(d, "runs", "fp8-rowwise", "metrics.jsonl"), 1.01, 40)
        runs = [dict(name=n, status="ok") for n in ("bf16", "fp8-tensorwise", "fp8-rowwise")]
        meta = dict(model="test", tolerance=0.005, window=4, date="d", gpu="g", commit="c", command="x")
        json.dump(dict(meta=meta, runs=runs), open(os.path.join(d, "study.json"), "w"))
        text = report(d, quiet=True, draw=False)
        res = json.load(open(os.path.join(d, "results.json")))
        rows = {r["name"]: r for r in res["rows"]}
        check(res["final_step"] == 40, f"final step {res['final_step']}, expected 40")
        check(abs(rows["fp8-tensorwise"]["gap"] - 0.002) < 1e-9, f"tensorwise gap {rows['fp8-tensorwise']['gap']}")
        check(rows["fp8-tensorwise"]["within"] is True, "tensorwise (0.2%) should pass")
        check(rows["fp8-rowwise"]["within"] is False, "rowwise (1%) should fail")
        check(abs(rows["fp8-rowwise"]["max_train_gap"][1] - 0.01) < 1e-9, "rowwise smoothed-train gap not 1%")
        check(rows["bf16"]["ms_per_step"] == 51.0, f"median ms/step {rows['bf16']['ms_per_step']}")
        check("**1 of 2 recipes within 0.5%**" in text, "the verdict line is missing:\n" + text)
        check("| fp8-rowwise | 40 | " in text and "**FAIL**" in text, "the rowwise row is wrong:\n" + text)
        # an early stop: compared at the last common eval step; a run without metrics is listed, not judged
        fake(os.path.join(d, "runs", "fp8-block", "metrics.jsonl"), 1.001, 23)
        runs.append(dict(name="fp8-block", status="stopped by the deadline"))
        runs.append(dict(name="fp8-none", status="exit 3"))
        json.dump(dict(meta=meta, runs=runs), open(os.path.join(d, "study.json"), "w"))
        text = report(d, quiet=True, draw=False)
        res = json.load(open(os.path.join(d, "results.json")))
        rows = {r["name"]: r for r in res["rows"]}
        check(res["final_step"] == 20, f"final step with an early stop {res['final_step']}, expected 20")
        check(any("step 20" in n for n in res["notes"]), f"no note of the early comparison: {res['notes']}")
        check(rows["fp8-none"]["within"] is None and "exit 3" in text, "the run without metrics")
        check("(1 not judged: no eval loss)" in text, "the unjudged count is missing:\n" + text)
        # the plot draws (when matplotlib is here)
        try:
            import matplotlib  # noqa: F401
            report(d, quiet=True, draw=True)
            check(os.path.getsize(os.path.join(d, "loss_parity.png")) > 10_000, "the PNG is too small")
        except ImportError:
            print("fp8_parity_report: matplotlib missing; the plot is not checked")
    if problems:
        print("fp8_parity_report self-test FAILED:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print("fp8_parity_report self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        if not os.path.exists(os.path.join(sys.argv[1], "study.json")):
            sys.exit(f"fp8_parity_report.py: error: '{sys.argv[1]}' holds no study.json (bench/fp8_loss_parity.py "
                     "writes it)")
        report(sys.argv[1])
    else:
        sys.exit(__doc__)
