"""launch/sweep.sh: one command from a sweep file to results.csv and plots.

    launch/sweep.sh configs/sweeps/x.yaml [--out DIR] [--set key=value]... [options] [-- extra mpirun flags]

Expands the product of the axes; plans every point (`ringtrain plan --json`) and skips those predicted not to
fit, recording why; trains the others through launch/train.sh with dp*cp*tp ranks; records each point's
outcome in DIR/points/<id>/status.json (a failed point is recorded with its error and the sweep goes on);
resumes without rerunning finished points; then writes DIR/results.csv, DIR/summary.md and DIR/plots/*.png.
The file format is described in spec.py and README.md ("Scaling studies").
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import aggregate  # noqa: E402
import measure  # noqa: E402
import runner as runner_mod  # noqa: E402
import spec  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_args(argv):
    mpirun_extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, mpirun_extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="launch/sweep.sh", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Extra mpirun flags go after --, e.g. -- --bind-to none")
    p.add_argument("sweep_file", help="sweep YAML (see configs/sweeps/)")
    p.add_argument("--out", help="output directory (default: runs/sweeps/<name>)")
    p.add_argument("--build-dir", default=os.environ.get("BUILD_DIR") or os.path.join(REPO_ROOT, "build"),
                   help="build with the ringtrain binary (default: $BUILD_DIR or build/)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override for every point, after the sweep file's `set` and before the axes (repeatable)")
    p.add_argument("--gpus", type=int, help="devices the ranks spread over (overrides the sweep file's gpus)")
    p.add_argument("--retry-failed", action="store_true", help="rerun points recorded as failed")
    p.add_argument("--rerun", action="store_true", help="rerun every point, finished or not")
    p.add_argument("--dry-run", action="store_true", help="plan every point and print what would run; run nothing")
    p.add_argument("--report-only", action="store_true", help="only rebuild results.csv, summary.md and plots")
    p.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="start no point predicted to end after this; stop a running one at it (it reruns on "
                        "resume); exit code 3 when points remain")
    p.add_argument("--export", metavar="DIR",
                   help="also copy the results to DIR for bench/results/: results.csv, summary.md, meta.json, "
                        "sweep.yaml, plots/ and per point status.json, config.yaml, metrics.jsonl, train.log "
                        "(never checkpoints)")
    p.add_argument("--verbose", "-v", action="store_true", help="stream each run's output")
    args = p.parse_args(argv)
    args.mpirun = mpirun_extra
    return args


def hms(seconds):
    if seconds is None:
        return "--:--:--"
    s = int(round(max(0.0, seconds)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def fmt_rate(x):
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if x >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


class Eta:
    """Predicts a point's duration as a + b * work, work = FLOPs per step x steps (from the plan), fitted to
    the points that ran (this time or earlier)."""

    def __init__(self):
        self.samples = []  # (work, seconds)

    def add(self, work, seconds):
        if seconds and seconds > 0:
            self.samples.append((work or 0.0, seconds))

    def predict(self, work):
        if not self.samples:
            return None
        n = len(self.samples)
        mean_w = sum(w for w, _ in self.samples) / n
        mean_s = sum(s for _, s in self.samples) / n
        var = sum((w - mean_w) ** 2 for w, _ in self.samples)
        if n >= 2 and var > 0:
            b = max(0.0, sum((w - mean_w) * (s - mean_s) for w, s in self.samples) / var)
            a = max(0.0, mean_s - b * mean_w)
        elif mean_w > 0:
            a, b = 0.0, mean_s / mean_w
        else:
            a, b = mean_s, 0.0
        return a + b * (work or mean_w)


def point_work(plan, steps):
    if not plan:
        return None
    return float(plan.get("hw_flops_per_step") or plan.get("flops_per_step") or 0) * steps


def git_commit():
    try:
        out = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", REPO_ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_name():
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        names = [l.strip() for l in out.stdout.splitlines() if l.strip()]
        return f"{len(names)} x {names[0]}" if names else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def prepare_base(sweep, out_dir):
    """(config file every point starts from, its identity for fingerprints)."""
    if sweep.base_path:
        rel = os.path.relpath(sweep.base_path, REPO_ROOT)
        return sweep.base_path, rel
    path = os.path.join(out_dir, "base.yaml")
    with open(path, "w") as f:
        f.write("# The sweep file's inline base config (empty: ringtrain's built-in defaults).\n")
        if sweep.base_inline:
            f.write(spec.yaml.safe_dump(sweep.base_inline, default_flow_style=False, sort_keys=False))
    return path, {"inline": sweep.base_inline}


def report(sweep, points, runner, out_dir, meta):
    rows = []
    for p in points:
        rows.append(aggregate.point_row(p, runner.load_status(p), runner, p.warmup_steps))
    aggregate.add_scaling_efficiency(rows, sweep.swept_keys())
    csv_path = os.path.join(out_dir, "results.csv")
    aggregate.write_csv(csv_path, rows, sweep.swept_keys())
    aggregate.write_summary(os.path.join(out_dir, "summary.md"), rows, sweep.swept_keys(), meta, sweep.label)
    print(f"sweep: wrote {csv_path} ({len(rows)} rows) and {os.path.join(out_dir, 'summary.md')}")
    try:
        import plots
        written, notes = plots.make_plots(rows, sweep, os.path.join(out_dir, "plots"))
        for w in written:
            print(f"sweep: wrote {w}")
        for n in notes:
            print(f"sweep: no plot {n}")
    except ImportError as e:
        print(f"sweep: plots not drawn ({e}); install matplotlib: sudo apt-get install -y python3-matplotlib",
              file=sys.stderr)
    return rows


def export(out_dir, points, runner, dest):
    """Copies what a results record needs (small files only) from out_dir to dest."""
    os.makedirs(dest, exist_ok=True)
    for name in ("results.csv", "summary.md", "meta.json", "sweep.yaml", "base.yaml"):
        if os.path.isfile(os.path.join(out_dir, name)):
            shutil.copyfile(os.path.join(out_dir, name), os.path.join(dest, name))
    if os.path.isdir(os.path.join(out_dir, "plots")):
        shutil.copytree(os.path.join(out_dir, "plots"), os.path.join(dest, "plots"), dirs_exist_ok=True)
    for p in points:
        files = [runner.status_path(p), os.path.join(runner.point_dir(p), "train.log"),
                 os.path.join(runner.run_dir(p), "config.yaml"), runner.metrics_path(p)]
        target = os.path.join(dest, "points", p.id)
        for f in files:
            if os.path.isfile(f):
                os.makedirs(target, exist_ok=True)
                shutil.copyfile(f, os.path.join(target, os.path.basename(f)))
    print(f"sweep: exported the results to {dest}")


def main(argv):
    start = time.time()  # --time-budget counts from here
    args = parse_args(argv)
    try:
        sweep = spec.load_sweep(args.sweep_file, REPO_ROOT)
        if args.gpus is not None:
            if args.gpus < 1:
                raise spec.SpecError("--gpus must be at least 1")
            sweep.gpus = args.gpus
        points = sweep.points(args.sets)
    except spec.SpecError as e:
        print(f"sweep: error: {e}", file=sys.stderr)
        return 2
    out_dir = os.path.abspath(args.out or os.path.join("runs", "sweeps", sweep.name))
    build_dir = os.path.abspath(args.build_dir)
    binary = os.path.join(build_dir, "ringtrain")
    if not args.report_only and not os.access(binary, os.X_OK):
        print(f"sweep: error: {binary} not found; build first (launch/build.sh) or pass --build-dir",
              file=sys.stderr)
        return 2
    os.makedirs(os.path.join(out_dir, "points"), exist_ok=True)
    shutil.copyfile(sweep.path, os.path.join(out_dir, "sweep.yaml"))
    base_config, base_ref = prepare_base(sweep, out_dir)
    runner = runner_mod.PointRunner(sweep, out_dir, base_config, base_ref, build_dir, REPO_ROOT, args.mpirun,
                                    args.verbose)
    meta = {"name": sweep.name, "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "gpu": gpu_name(), "commit": git_commit(),
            "command": " ".join(shlex.quote(a) for a in ["launch/sweep.sh"] + argv),
            "sweep_file": os.path.relpath(sweep.path, REPO_ROOT), "label": sweep.label}
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    if args.report_only:
        report(sweep, points, runner, out_dir, meta)
        if args.export:
            export(out_dir, points, runner, os.path.abspath(args.export))
        return 0

    # Phase 1: which points need work; plan them; skip those that will not fit.
    eta = Eta()
    todo = []
    counts = {"done": 0, "failed": 0, "skipped": 0}
    rules = " (other counts per measure.per_point)" if sweep.measure_rules else ""
    print(f"sweep {sweep.name}: {len(points)} point(s), {sweep.steps} steps each ({sweep.warmup_steps} warm-up)"
          f"{rules} -> {out_dir}")
    for p in points:
        old = runner.load_status(p)
        finished = old and old.get("status") in runner_mod.FINISHED
        same = finished and old.get("fingerprint") == runner.fingerprint(p)
        retry = finished and old["status"] == "failed" and args.retry_failed
        if same and not args.rerun and not retry:
            counts[old["status"]] += 1
            if old["status"] == "done":
                eta.add(point_work(old.get("plan"), p.steps), old.get("duration_s"))
            print(f"  [{p.index + 1}/{len(points)}] {p.describe()}: {old['status']} earlier, not rerun")
            continue
        if finished and not same:
            print(f"  [{p.index + 1}/{len(points)}] {p.describe()}: its command changed since it ran; running again")
        status = runner.new_status(p)
        plan, error = runner.plan(p)
        status["plan"] = plan
        save = (lambda: None) if args.dry_run else (lambda: runner.save_status(p, status))  # dry run: no files
        if error:
            status.update(status="failed", error=error)
            save()
            counts["failed"] += 1
            print(f"  [{p.index + 1}/{len(points)}] {p.describe()}: FAILED at plan: {error}")
            continue
        fits, note = runner.fit(plan)
        status["fit_note"] = note
        if not fits:
            status.update(status="skipped", error="will not fit: " + note)
            save()
            counts["skipped"] += 1
            print(f"  [{p.index + 1}/{len(points)}] {p.describe()}: skipped, {note}")
            continue
        if args.dry_run:
            print(f"  [{p.index + 1}/{len(points)}] {p.describe()}: would run {p.steps} steps on "
                  f"{plan['world_size']} rank(s); {note}")
            print("      " + " ".join(shlex.quote(c) for c in runner.train_command(p)))
        todo.append((p, status))
    if args.dry_run:
        print(f"sweep {sweep.name}: dry run: {len(todo)} to run, {counts['skipped']} will not fit, "
              f"{counts['failed']} fail at plan; nothing was written under {os.path.join(out_dir, 'points')}")
        return 0

    # Phase 2: run.
    stopped_early = False
    for n, (p, status) in enumerate(todo):
        plan = status["plan"]
        work = point_work(plan, p.steps)
        predicted = eta.predict(work)
        elapsed = time.time() - start
        budget_left = args.time_budget - elapsed if args.time_budget else None
        if budget_left is not None and (budget_left <= 0 or (predicted and predicted > budget_left)):
            print(f"sweep: --time-budget: {len(todo) - n} point(s) left (next needs about {hms(predicted)}, "
                  f"{hms(budget_left)} left); run the same command again to continue")
            stopped_early = True
            break
        print(f"  [{p.index + 1}/{len(points)}] {p.describe()}: running on {plan['world_size']} rank(s)"
              f"{'' if predicted is None else ', about ' + hms(predicted)} ...", flush=True)
        status.update(status="interrupted", error="the sweep stopped while this point ran",
                      started=datetime.datetime.now().isoformat(timespec="seconds"),
                      command=runner.train_command(p))
        runner.save_status(p, status)
        try:
            outcome, error, seconds = runner.run(p, sweep.timeout_s, budget_left)
        except KeyboardInterrupt:
            print("\nsweep: interrupted; finished points are kept, run the same command again to resume",
                  file=sys.stderr)
            return 130
        status.update(status=outcome, error=error, duration_s=round(seconds, 3),
                      finished=datetime.datetime.now().isoformat(timespec="seconds"))
        runner.save_status(p, status)
        if outcome == "interrupted":
            print(f"      stopped: {error}")
            stopped_early = True
            break
        counts[outcome] += 1
        if outcome == "done":
            eta.add(work, seconds)
            records = runner.records(p)
            s = measure.summarize(records, p.warmup_steps)
            ms = s["step_ms_median"] or float("nan")
            tok_s = float(plan["tokens_per_step"]) / (ms / 1e3)
            loss = "n/a" if s["loss"] is None else f"{s['loss']:.4f}"
            result = f"done in {seconds:.1f} s | {ms:.1f} ms/step | {fmt_rate(tok_s)} tok/s | loss {loss}"
        else:
            result = f"FAILED after {seconds:.1f} s: {error}"
        remaining = [point_work(q_status["plan"], q.steps) for q, q_status in todo[n + 1:]]
        left = sum(eta.predict(w) or 0 for w in remaining) if remaining else 0
        print(f"      {result} | elapsed {hms(time.time() - start)} | ETA {hms(left)}", flush=True)

    report(sweep, points, runner, out_dir, meta)
    if args.export:
        export(out_dir, points, runner, os.path.abspath(args.export))
    print(f"sweep {sweep.name}: {counts['done']} done, {counts['failed']} failed, {counts['skipped']} skipped"
          f"{', stopped early' if stopped_early else ''}")
    return 3 if stopped_early else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("\nsweep: interrupted; run the same command again to resume", file=sys.stderr)
        sys.exit(130)
