#!/usr/bin/env python3
"""FP8 loss parity (issue 44, README "FP8 linear layers"): one model trained on real text once in bf16 and once per
FP8 recipe (train.precision: fp8, fp8.recipe), same data, seed and held-out windows; each recipe's final held-out
loss against bf16's (goal: within 0.5% relative).

  python3 bench/fp8_loss_parity.py --out DIR [--ringtrain PATH] [--steps 2000] [--recipes tensorwise,rowwise,block]
                                   [--data-dir DIR] [--time-budget S] [--set key=value]... [--tiny] [--overwrite]
                                   [--config YAML] [--runs bf16,fp8] [--fp8-attention] [--evals] [--add]
                                   [--report-only] [--tolerance 0.005]

FP8 attention (issue 47, configs/fp8-attention-parity-300m.yaml: 310M, head_dim 128, 16K tokens): --fp8-attention
gives the FP8 runs fp8.attention: true (named fp8-<recipe>-attention); --runs picks which runs this invocation
trains (bf16, fp8: one per --recipes), so each run can have its own device call; --add keeps what DIR holds (its data,
the runs of earlier invocations, study.json) and adds or replaces the runs named; --evals evaluates each run's final
checkpoint after it trains (bench/fp8_parity_evals.py: loss by position and passkey cases, their plots side by
side); --report-only writes the report and the eval plots from DIR and trains nothing. The issue's run:
  python3 bench/fp8_loss_parity.py --out runs/fp8-attention-parity --config configs/fp8-attention-parity-300m.yaml \
      --runs bf16 --evals --tolerance 0.01 --time-budget 540                                  # device call 1
  python3 bench/fp8_loss_parity.py --out runs/fp8-attention-parity --config configs/fp8-attention-parity-300m.yaml \
      --runs fp8 --recipes tensorwise --fp8-attention --evals --add --tolerance 0.01 --time-budget 540   # call 2
  python3 bench/fp8_loss_parity.py --out runs/fp8-attention-parity --report-only --tolerance 0.01     # CPU
--merge DIR (with --report-only, repeatable) first copies the runs of another study directory into DIR (their
study.json entries, metrics.jsonl, eval results and logs; no checkpoints): for runs made on different machines.

1. data   the context-extension demo's data stage (bench/context_extension.py --stage data: the .py files of this
          python3's standard library and site-packages, a 16,384-token byte-level BPE, launch/prepare_data.py
          shards, the first documents held out) into DIR/corpus; --data-dir reuses shards already prepared
          (a context_extension.py output directory, or a launch/prepare_data.py --out directory).
2. runs   configs/fp8-parity-300m.yaml (336M GPT, 8,192 tokens per step) through launch/train.sh: bf16 first, then
          fp8 with each recipe, into DIR/runs/<name>/ (metrics.jsonl: every step's training loss, the eval loss
          every --eval-every steps on the same held-out windows). A run that fails (a divergence stops it with exit
          3) is reported as such and the next one runs.
3. report bench/fp8_parity_report.py: DIR/summary.md (the table: final held-out loss per run, gap to bf16, pass or
          fail against --tolerance, the largest gaps), DIR/loss_parity.png (training loss smoothed, eval loss, the
          gap per recipe with its largest eval gap marked) and DIR/results.json; the summary is printed too.

--time-budget S: the whole command's wall time. Each run gets an equal share of what is left; past it the trainer
gets SIGTERM (it finishes the step and stops) and the report compares the runs at the last eval step all reached.
On SIGTERM or Ctrl-C the driver stops the run and writes the report of what ran. Exit status 1 when a run failed
(after the report), 2 for bad options. --tiny runs the same steps on the CPU in under a minute (2 layers of d 128,
256 tokens, a 512-token vocabulary): the check that the command works.
DIR must not exist or be empty, unless --overwrite: then its runs and results are replaced (a complete data stage
in DIR/corpus is kept and reused). Needs numpy, tokenizers and matplotlib (launch/install-deps.sh --prepare-data).
"""
import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
from context_extension import gpu_name  # noqa: E402
from fp8_parity_report import REFERENCE, report  # noqa: E402
import fp8_parity_evals  # noqa: E402

PY = sys.executable
RECIPES = ("tensorwise", "rowwise", "block")
NAME = "fp8_loss_parity"
EVAL_RESERVE_S = 75  # --evals: seconds kept from a run's deadline for its two evals (GPU: start-up dominates)
# --tiny: the CPU check. The block recipe tiles by 128, so every width is a multiple of it.
TINY_SETS = ["model.n_layer=2", "model.d_model=128", "model.n_head=2", "model.n_kv_head=2", "model.d_ff=512",
             "model.vocab_size=512", "data.seq_len=256", "train.batch_size=2", "train.eval_batches=2",
             "train.lm_head_chunk=512", "optim.warmup_steps=4", "optim.lr=1e-3", "device=cpu"]


def say(msg):
    print(f"{NAME}: {msg}", flush=True)


def fail(msg, code=2):
    print(f"{NAME}: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def clock(seconds):
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def shards_in(directory):
    """The directory holding meta.json and the train/val shards under `directory` (itself or its data/), or None."""
    for d in (os.path.join(directory, "data"), directory):
        if os.path.isfile(os.path.join(d, "meta.json")):
            return d
    return None


def last_metrics(path):
    """(last training step line, last eval loss) of a metrics.jsonl being written."""
    step, ev = None, None
    try:
        with open(path) as f:
            for line in f:
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if m.get("eval_loss") is not None:
                    ev = m["eval_loss"]
                elif m.get("loss") is not None:
                    step = m
    except OSError:
        pass
    return step, ev


class Study:
    def __init__(self, args):
        self.args, self.out = args, os.path.abspath(args.out)
        self.start = time.time()
        self.child = None
        self.runs = []      # dict(name, precision, recipe, status, seconds)
        self.walls = []     # seconds of each finished run
        self.env = dict(os.environ, BUILD_DIR=os.path.dirname(os.path.abspath(args.ringtrain)),
                        OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1")
        self.meta = {}

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    def left(self):
        return self.args.time_budget - (time.time() - self.start) if self.args.time_budget else None

    # ---- 1: data ----
    def data(self):
        if self.args.data_dir:
            shards = shards_in(self.args.data_dir)
            if not shards:
                fail(f"--data-dir '{self.args.data_dir}' holds no prepared shards (meta.json in it or in its data/); "
                     "give a bench/context_extension.py output directory or a launch/prepare_data.py --out one")
            say(f"data: reusing {shards}")
        else:
            shards = shards_in(self.path("corpus"))
            if shards:
                say(f"data: reusing the complete data stage in {self.path('corpus')}")
            else:
                shutil.rmtree(self.path("corpus"), ignore_errors=True)
                say("data: the context-extension demo's data stage (corpus, tokenizer, shards) ...")
                t0 = time.time()
                cmd = [PY, os.path.join(BENCH, "context_extension.py"), self.path("corpus"), "--stage", "data",
                       "--data-workers", str(self.args.data_workers)] + (["--tiny"] if self.args.tiny else [])
                with open(self.path("logs", "data.log"), "w") as log:
                    rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env).returncode
                shards = shards_in(self.path("corpus"))
                if rc != 0 or not shards:
                    tail = open(self.path("logs", "data.log"), errors="replace").read().splitlines()[-10:]
                    fail(f"the data stage exited with {rc}; the end of {self.path('logs', 'data.log')}:\n  " +
                         "\n  ".join(tail), 1)
                say(f"data: done in {time.time() - t0:.0f} s")
        meta = json.load(open(os.path.join(shards, "meta.json")))
        train = sum(s["tokens"] for s in meta["train_shards"])
        val = sum(s["tokens"] for s in meta["val_shards"])
        self.meta["data"] = (f"{train:,} training tokens, {val:,} held out, a {meta['vocab_size']:,}-token BPE "
                             f"(`{shards}`)")
        return shards

    # ---- 2: one run ----
    def model_sets(self, shards, precision, recipe, attention):
        """The overrides that make a run's model, data and precision (the end-of-run evals take these too)."""
        a = self.args
        s = [f"data.path={shards}/train_*.bin", f"data.eval_path={shards}/val_*.bin", f"train.precision={precision}"]
        s += [f"fp8.recipe={recipe}"] if recipe else []
        s += [f"fp8.attention={'true' if attention else 'false'}"]
        s += TINY_SETS if a.tiny else []
        return s + a.set  # the command line's last: they win

    def sets(self, shards, name, precision, recipe, attention):
        a = self.args
        s = [f"train.run_dir={self.path('runs', name)}", f"train.steps={a.steps}", f"train.eval_every={a.eval_every}",
             "train.overwrite=true"] + (["checkpoint.save_final=true"] if a.evals else [])
        return s + self.model_sets(shards, precision, recipe, attention)

    def train(self, index, total, shards, name, precision, recipe, attention=False):
        args = self.args
        sets = self.sets(shards, name, precision, recipe, attention)
        cmd = [os.path.join(ROOT, "launch", "train.sh"), args.config] + [x for s in sets for x in ("--set", s)]
        entry = dict(name=name, precision=precision, recipe=recipe or "", attention=attention, status="running",
                     seconds=None)
        self.runs = [r for r in self.runs if r["name"] != name] + [entry]  # --add: a run named again is replaced
        self.save_study()
        left = self.left()
        reserve = EVAL_RESERVE_S if args.evals else 0
        deadline = None if left is None else max(10.0, (left - 20) / (total - index) - reserve)
        say(f"[{index + 1}/{total}] {name}: {args.steps} steps" +
            ("" if deadline is None else f" (deadline {deadline:.0f} s)"))
        log_path = self.path("logs", name + ".log")
        metrics = self.path("runs", name, "metrics.jsonl")
        t0, last_print, termed = time.time(), 0.0, False
        with open(log_path, "w") as log:
            proc = self.start_logged(cmd, log)
            while proc.poll() is None:
                time.sleep(1)
                now = time.time()
                if deadline is not None and not termed and now - t0 > deadline:
                    say(f"{name}: its {deadline:.0f} s are up; asking it to stop after this step")
                    proc.send_signal(signal.SIGTERM)
                    termed = True
                if now - last_print >= args.progress_every:
                    last_print = now
                    self.progress(index, total, name, metrics, now - t0)
            self.child = None
        rc, seconds = proc.returncode, time.time() - t0
        step, _ = last_metrics(metrics)
        reached = step["step"] if step else 0
        if rc == 0:
            entry["status"] = "ok"
        elif termed:
            entry["status"] = f"stopped by the deadline at step {reached}"
        else:
            tail = open(log_path, errors="replace").read().splitlines()[-6:]
            entry["status"] = f"exit {rc} at step {reached} (logs/{name}.log)"
            say(f"{name}: exited with {rc} at step {reached}; the end of {log_path}:\n  " + "\n  ".join(tail))
        entry["seconds"] = round(seconds, 1)
        self.walls.append(seconds)
        self.note_shape(log_path)
        self.save_study()
        say(f"[{index + 1}/{total}] {name}: {entry['status']} in {seconds:.0f} s")
        if args.evals and not entry["status"].startswith("exit"):
            note = fp8_parity_evals.run_evals(
                self.out, name, args.ringtrain, args.config, self.model_sets(shards, precision, recipe, attention),
                shards, self.seq_len, self.eval_batch, self.run_logged, say)
            if note:
                entry["status"] += f"; {note}"
                say(f"{name}: {note}")
            self.save_study()

    def start_logged(self, cmd, log):
        """Starts cmd with its output in the open file log (after a "$ cmd" line), in its own session, as self.child."""
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env,
                                start_new_session=True)
        self.child = proc
        return proc

    def run_logged(self, label, cmd, log_path):
        """A helper command (evals, needles, plots) with its output in log_path; stopped like a run on a signal."""
        with open(log_path, "a") as log:
            proc = self.start_logged(cmd, log)
            proc.wait()
            self.child = None
        return proc.returncode

    def progress(self, index, total, name, metrics, elapsed):
        step, ev = last_metrics(metrics)
        if not step:
            say(f"[{index + 1}/{total}] {name}: starting ({elapsed:.0f} s)")
            return
        s, n = step["step"], self.args.steps
        run_left = elapsed / s * (n - s) if s else 0  # includes start-up and evals, unlike the trainer's ETA
        per_run = sum(self.walls) / len(self.walls) if self.walls else elapsed + run_left
        all_left = run_left + per_run * (total - index - 1)
        say(f"[{index + 1}/{total}] {name}: step {s}/{n} | loss {step['loss']:.4f}" +
            ("" if ev is None else f" | eval {ev:.4f}") +
            (f" | {step['ms_per_step']:.1f} ms/step" if step.get("ms_per_step") else "") +
            f" | run ETA {clock(run_left)} | study ETA {clock(all_left)}")

    def note_shape(self, log_path):
        """The trainer's header line ("parameters N | memory per rank ... | tokens/step T") into the summary's setup,
        once: what ran, whatever --set changed."""
        if "parameters" in self.meta:
            return
        for line in open(log_path, errors="replace"):
            m = re.match(r"parameters (\d+) \| memory per rank (.+?) \(arena\) \| tokens/step (\d+)", line.strip())
            if m:
                self.meta["parameters"] = f"{int(m.group(1)) / 1e6:.1f}M"
                self.meta["setup"] = self.meta["setup"].replace("{tokens}", f"{int(m.group(3)):,} tokens")
                self.meta["setup"] += f"; {self.meta['parameters']} parameters, arena {m.group(2)} per rank"
                return

    # ---- bookkeeping ----
    def save_study(self):
        with open(self.path("study.json"), "w") as f:
            json.dump(dict(meta=self.meta, runs=self.runs), f, indent=1)

    def stop_child(self):
        """train.sh: the first SIGTERM asks for a save and stop, the second gives it up, the third kills."""
        proc = self.child
        for _ in range(3):
            if proc is None or proc.poll() is not None:
                return
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def config_value(config, key, sets):
    """The value of `section.key` (e.g. data.seq_len) as the run sees it: the last --set of it, else the YAML's (a
    plain two-level read of the driver's own configs), else None."""
    for s in reversed(sets):
        if s.startswith(key + "="):
            return s.split("=", 1)[1]
    section, name = key.split(".", 1)
    current = None
    for line in open(config):
        text = line.split("#", 1)[0].rstrip()
        if text and not text.startswith(" "):
            current = text.rstrip(":").strip()
        elif current == section and text.strip().startswith(name + ":"):
            return text.split(":", 1)[1].strip()
    return None


def model_description(config, sets):
    v = {k: config_value(config, "model." + k, sets) for k in ("n_layer", "d_model", "n_head", "d_ff", "vocab_size")}
    seq = config_value(config, "data.seq_len", sets)
    try:
        head = int(v["d_model"]) // int(v["n_head"])
    except (TypeError, ValueError, ZeroDivisionError):
        head = "?"
    return (f"GPT L{v['n_layer']} d{v['d_model']} H{v['n_head']} (head_dim {head}), MLP {v['d_ff']}, vocab "
            f"{v['vocab_size']}, {seq} tokens")


def merge_study(src, out):
    """Copies src's runs into out (study.json entries replacing those of the same name, each run's metrics.jsonl,
    src/eval's results and logs; checkpoints stay behind). out is created when missing (with src's meta)."""
    if not os.path.isfile(os.path.join(src, "study.json")):
        fail(f"--merge '{src}' holds no study.json")
    theirs = json.load(open(os.path.join(src, "study.json")))
    mine_path = os.path.join(out, "study.json")
    mine = json.load(open(mine_path)) if os.path.isfile(mine_path) else dict(meta=theirs.get("meta", {}), runs=[])
    names = [r["name"] for r in theirs.get("runs", [])]
    mine["runs"] = [r for r in mine.get("runs", []) if r["name"] not in names] + theirs.get("runs", [])
    if theirs.get("meta", {}).get("command") and theirs["meta"]["command"] not in mine["meta"].get("command", ""):
        mine["meta"]["command"] = (mine["meta"].get("command", "") + " ; " + theirs["meta"]["command"]).strip(" ;")
    for name in names:
        os.makedirs(os.path.join(out, "runs", name), exist_ok=True)
        m = os.path.join(src, "runs", name, "metrics.jsonl")
        if os.path.isfile(m):
            shutil.copyfile(m, os.path.join(out, "runs", name, "metrics.jsonl"))
    for sub in ("eval", "logs"):
        if not os.path.isdir(os.path.join(src, sub)):
            continue
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        for f in os.listdir(os.path.join(src, sub)):
            if os.path.isfile(os.path.join(src, sub, f)) and (sub == "logs" or f.endswith(".jsonl")):
                shutil.copyfile(os.path.join(src, sub, f), os.path.join(out, sub, f))
    os.makedirs(out, exist_ok=True)
    with open(mine_path, "w") as f:
        json.dump(mine, f, indent=1)
    say(f"merged {', '.join(names) or 'no runs'} from {src}")


def commit_id():
    git = lambda *a: subprocess.run(["git", "-C", ROOT] + list(a), capture_output=True, text=True).stdout.strip()  # noqa
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + (" (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (new or empty; see --overwrite)")
    ap.add_argument("--ringtrain", default=os.path.join(ROOT, "build", "ringtrain"), help="the trainer binary")
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "fp8-parity-300m.yaml"))
    ap.add_argument("--steps", type=int, default=2000, help="optimizer steps per run (the cosine schedule's length)")
    ap.add_argument("--eval-every", type=int, default=0, help="steps between evals (default: steps / 8, 250 for 2000)")
    ap.add_argument("--recipes", default=",".join(RECIPES), help="FP8 recipes to run after bf16, comma-separated "
                                                                  f"({', '.join(RECIPES)}); empty: bf16 alone")
    ap.add_argument("--data-dir", help="prepared shards to reuse instead of the data stage")
    ap.add_argument("--data-workers", type=int, default=os.cpu_count() or 1, help="tokenizing processes")
    ap.add_argument("--tolerance", type=float, default=0.005, help="relative gap of the final held-out loss allowed")
    ap.add_argument("--window", type=int, default=0, help="steps of the training-loss smoothing (default: steps / 50)")
    ap.add_argument("--time-budget", type=float, default=0, help="seconds this command may take in all (0: none)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override for every run")
    ap.add_argument("--progress-every", type=float, default=15, help="seconds between progress lines")
    ap.add_argument("--tiny", action="store_true", help="the CPU check: a tiny model and data, about a minute")
    ap.add_argument("--overwrite", action="store_true", help="replace DIR's runs and results (keeps its data)")
    ap.add_argument("--commit", default="", help="recorded in the summary (default: this checkout's)")
    ap.add_argument("--runs", default="bf16,fp8", help="which runs this invocation trains, comma-separated: bf16, fp8 "
                                                       "(one per --recipes); one of them alone fits a device call")
    ap.add_argument("--fp8-attention", action="store_true", help="the FP8 runs also set fp8.attention: true (named "
                                                                 "fp8-<recipe>-attention)")
    ap.add_argument("--evals", action="store_true", help="after each run, loss by position and passkey cases on its "
                                                         "final checkpoint (bench/fp8_parity_evals.py)")
    ap.add_argument("--add", action="store_true", help="keep DIR's data, earlier runs and study.json; add (or "
                                                       "replace) the runs of this invocation")
    ap.add_argument("--report-only", action="store_true", help="write the report and eval plots from DIR; train "
                                                               "nothing")
    ap.add_argument("--merge", action="append", default=[], metavar="DIR", help="with --report-only: copy the runs "
                    "of another study directory into --out first (repeatable)")
    args = ap.parse_args()

    out = os.path.abspath(args.out)
    if args.merge and not args.report_only:
        fail("--merge goes with --report-only")
    if args.report_only:
        for other in args.merge:
            merge_study(os.path.abspath(other), out)
        if not os.path.isfile(os.path.join(out, "study.json")):
            fail(f"--report-only: '{args.out}' holds no study.json (a directory this driver wrote with --out)")
        study = json.load(open(os.path.join(out, "study.json")))
        study["meta"]["tolerance"] = args.tolerance
        with open(os.path.join(out, "study.json"), "w") as f:
            json.dump(study, f, indent=1)
        report(out)
        print(fp8_parity_evals.report_evals(out, fp8_parity_evals.run_logged, say))
        say(f"wrote {os.path.join(out, 'summary.md')} (and the plots beside it)")
        return
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not runs or any(r not in ("bf16", "fp8") for r in runs) or len(set(runs)) != len(runs):
        fail(f"--runs '{args.runs}': bf16 and/or fp8, each at most once")
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    bad = [r for r in recipes if r not in RECIPES]
    if bad or len(set(recipes)) != len(recipes):
        fail(f"--recipes '{args.recipes}': each of {', '.join(RECIPES)} at most once")
    if args.steps < 1 or args.data_workers < 1 or args.tolerance <= 0 or args.eval_every < 0 or args.window < 0:
        fail("--steps and --data-workers must be >= 1, --tolerance > 0, --eval-every and --window >= 0")
    args.eval_every = args.eval_every or max(1, args.steps // 8)
    window = args.window or max(1, args.steps // 50)
    if not os.access(args.ringtrain, os.X_OK) or os.path.basename(args.ringtrain) != "ringtrain":
        fail(f"--ringtrain '{args.ringtrain}' is not an executable named ringtrain; build it first "
             "(launch/build.sh --target ringtrain) or give its path")
    if not os.path.isfile(args.config):
        fail(f"--config '{args.config}' not found")
    bad_sets = [s for s in args.set if "=" not in s]
    if bad_sets:
        fail(f"--set '{bad_sets[0]}' is not KEY=VALUE")
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"--out '{args.out}' exists and is not a directory; give a new one")
    if os.path.isdir(out) and os.listdir(out) and not args.add:
        if not args.overwrite:
            fail(f"--out '{args.out}' exists and is not an empty directory; choose a new one, pass --add to add this "
                 "invocation's runs to it, or --overwrite to replace its runs and results (a complete data stage in "
                 "it is reused)")
        for name in ("runs", "logs", "eval", "study.json", "summary.md", "results.json", "loss_parity.png",
                     "evals.md", "loss_by_position.png", "passkey.png"):
            p = os.path.join(out, name)
            shutil.rmtree(p) if os.path.isdir(p) else (os.remove(p) if os.path.exists(p) else None)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)

    study = Study(args)
    all_sets = (TINY_SETS if args.tiny else []) + args.set
    study.seq_len = int(config_value(args.config, "data.seq_len", all_sets) or 4096)
    study.eval_batch = 2 if args.tiny else max(1, min(8, 131072 // study.seq_len))  # 128K held-out tokens
    study.meta = dict(
        model=(model_description(args.config, all_sets) if not args.tiny else "tiny CPU check (L2 d128)"),
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), gpu=gpu_name(),
        commit=args.commit or commit_id(), command="python3 bench/fp8_loss_parity.py " + " ".join(sys.argv[1:]),
        config=os.path.relpath(os.path.abspath(args.config), ROOT) + (" + " + ", ".join(args.set) if args.set else ""),
        setup=f"{args.steps} steps of {{tokens}} each, eval every {args.eval_every} steps on the same held-out windows, "
              "seed of the config",
        tolerance=args.tolerance, window=window)
    prior = os.path.join(out, "study.json")
    if args.add and os.path.isfile(prior):  # the earlier invocations' runs and setup stay; this one's runs replace
        earlier = json.load(open(prior))
        study.runs = earlier.get("runs", [])
        kept = earlier.get("meta", {})
        command = study.meta["command"]
        study.meta = dict(kept, **{k: v for k, v in study.meta.items() if k in ("date", "commit", "tolerance")})
        study.meta["command"] = (kept.get("command", "") + " ; " + command).strip(" ;")
    study.save_study()

    def on_signal(signum, frame):
        say(f"signal {signum}: stopping the run in progress and writing the report of what ran")
        study.stop_child()
        for r in study.runs:
            if r["status"] == "running":
                r["status"] = f"stopped by signal {signum}"
            study.note_shape(study.path("logs", r["name"] + ".log"))
        study.save_study()
        report(out)
        fp8_parity_evals.report_evals(out, fp8_parity_evals.run_logged, say)
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    shards = study.data()
    study.save_study()
    suffix = "-attention" if args.fp8_attention else ""
    plan = ([(REFERENCE, "bf16", None, False)] if "bf16" in runs else []) + \
        ([(f"fp8-{r}{suffix}", "fp8", r, args.fp8_attention) for r in recipes] if "fp8" in runs else [])
    if not plan:
        fail("nothing to run: --runs fp8 with an empty --recipes")
    for i, (name, precision, recipe, attention) in enumerate(plan):
        study.train(i, len(plan), shards, name, precision, recipe, attention)
    report(out)
    fp8_parity_evals.report_evals(out, study.run_logged, say)
    say(f"wrote {study.path('summary.md')}, {study.path('loss_parity.png')} and {study.path('results.json')} "
        f"in {clock(time.time() - study.start)}")
    failed = [r["name"] for r in study.runs if r["status"].startswith("exit")]
    if failed:  # the report says how each ended; the exit status says that not every run finished
        say(f"error: {', '.join(failed)} did not finish (see the status column and logs/)")
        sys.exit(1)


if __name__ == "__main__":
    main()
