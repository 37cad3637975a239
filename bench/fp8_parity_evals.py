#!/usr/bin/env python3
"""End-of-run evals of the FP8 loss-parity study (bench/fp8_loss_parity.py --evals; issue 47's "loss by position and
the passkey heatmap of the two models side by side"): each run's final checkpoint through `ringtrain eval` (the
context-extension demo's two tasks, bench/context_extension.py step 7), then one plot per task with every run that
has results, side by side, and OUT/evals.md with their tables.

  python3 bench/fp8_parity_evals.py OUT     # redraw OUT/loss_by_position.png, OUT/passkey.png and OUT/evals.md
                                            # from OUT/eval/*.jsonl (the driver's --report-only does this too)

Per run (the driver calls run_evals after its training):
  loss-by-position  OUT/eval/loss-by-position-<run>.jsonl: the first min(8, 131072 / seq_len) held-out windows
                    (about 128K tokens, in order) as one batch, mean loss per position bucket
  needle (passkey)  OUT/eval/needle-<run>.jsonl on OUT/eval/passkey (launch/make_needles.py, made once from the data
                    stage's tokenizer.json and haystack.txt, the same cases for every run): 4 lengths from seq_len / 8
                    to seq_len (at least 128 tokens), depths 0, 0.25, 0.5, 0.75, 1, 2 samples each
Both run with the run's own precision settings (train.precision, fp8.*: the FP8 run's forward is its FP8 forward) and
full activation checkpointing.
"""
import json
import os
import subprocess
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
PY = sys.executable
TASKS = (("loss-by-position", "launch/plot_loss_by_position.py", "loss_by_position.png"),
         ("needle", "launch/plot_needles.py", "passkey.png"))
DEPTHS = "0,0.25,0.5,0.75,1"


def latest_checkpoint(run_dir):
    """run_dir/checkpoints/main/step_<N> of the largest N, or None."""
    main = os.path.join(run_dir, "checkpoints", "main")
    if not os.path.isdir(main):
        return None
    steps = [d for d in os.listdir(main) if d.startswith("step_") and d[5:].isdigit()]
    return os.path.join(main, max(steps, key=lambda d: int(d[5:]))) if steps else None


def tokenizer_files(shards):
    """(tokenizer.json, haystack.txt) of the data stage whose shards are in `shards` (its data/ or itself)."""
    for d in (os.path.dirname(shards), shards):
        tok = os.path.join(d, "tokenizer.json")
        if os.path.isfile(tok):
            hay = os.path.join(d, "haystack.txt")
            return tok, hay if os.path.isfile(hay) else None
    return None, None


def needle_lengths(seq_len):
    lengths = sorted({max(128, seq_len >> i) for i in range(4)})
    return ",".join(str(n) for n in lengths if n <= seq_len)


def make_passkey_cases(out, shards, seq_len, run, log):
    """OUT/eval/passkey once (reused by every later run and invocation). Returns its path or None with the reason."""
    cases = os.path.join(out, "eval", "passkey")
    if os.path.isfile(os.path.join(cases, "cases.jsonl")):
        return cases, ""
    tok, hay = tokenizer_files(shards)
    if not tok:
        return None, f"no tokenizer.json beside {shards}: passkey cases skipped"
    cmd = [PY, os.path.join(ROOT, "launch", "make_needles.py"), "--out", cases, "--tokenizer", tok, "--kind",
           "passkey", "--max-length", str(seq_len), "--lengths", needle_lengths(seq_len), "--depths", DEPTHS,
           "--samples", "2", "--overwrite"] + (["--haystack", hay] if hay else [])
    rc = run("make_needles", cmd, log)
    return (cases, "") if rc == 0 else (None, f"make_needles exited with {rc} (logs/make_needles.log)")


def run_evals(out, name, ringtrain, config, sets, shards, seq_len, batch, run, say):
    """Evaluates run `name`'s final checkpoint on both tasks. sets: the run's model, data and precision overrides (no
    run_dir). run(label, cmd, log_path) -> exit code. Returns a note for the run's status ("" when both ran)."""
    ckpt = latest_checkpoint(os.path.join(out, "runs", name))
    if not ckpt:
        return "no final checkpoint: evals skipped"
    os.makedirs(os.path.join(out, "eval"), exist_ok=True)
    notes = []
    cases, why = make_passkey_cases(out, shards, seq_len, run, os.path.join(out, "logs", "make_needles.log"))
    if why:
        notes.append(why)
    eval_sets = sets + ["train.init_from=", f"train.batch_size={batch}", "train.eval_batches=1",
                        "train.checkpointing=full"]
    for task, _, _ in TASKS:
        if task == "needle" and not cases:
            continue
        result = os.path.join(out, "eval", f"{task}-{name}.jsonl")
        cmd = [ringtrain, "eval", config, "--checkpoint", ckpt, "--task", task, "--out", result, "--overwrite"]
        cmd += [x for s in eval_sets for x in ("--set", s)]
        if task == "needle":
            cmd += ["--cases", cases]
        say(f"{name}: eval {task} on {os.path.relpath(ckpt, out)}")
        rc = run(f"eval-{task}-{name}", cmd, os.path.join(out, "logs", f"eval-{task}-{name}.log"))
        if rc != 0:
            notes.append(f"eval {task} exited with {rc} (logs/eval-{task}-{name}.log)")
    return "; ".join(notes)


def read_jsonl(path):
    return [json.loads(s) for s in open(path) if s.strip()]


def tables(out, names):
    """Markdown: loss by position (bucket x run) and passkey accuracy by length (mean over depths and samples)."""
    L = []
    lbp = {n: read_jsonl(os.path.join(out, "eval", f"loss-by-position-{n}.jsonl")) for n in names
           if os.path.isfile(os.path.join(out, "eval", f"loss-by-position-{n}.jsonl"))}
    if lbp:
        ref = next(iter(lbp.values()))
        L += ["", "Held-out loss by position (mean over the windows' targets in each bucket):", "",
              "| positions | " + " | ".join(lbp) + " |", "|---|" + "---|" * len(lbp)]
        for i, b in enumerate(ref):
            cells = [format(rows[i]["mean_loss"], ".4f") if i < len(rows) else "" for rows in lbp.values()]
            L.append(f"| {b['lo']}-{b['hi']} | " + " | ".join(cells) + " |")
    pk = {n: read_jsonl(os.path.join(out, "eval", f"needle-{n}.jsonl")) for n in names
          if os.path.isfile(os.path.join(out, "eval", f"needle-{n}.jsonl"))}
    if pk:
        lengths = sorted({int(r["length"]) for rows in pk.values() for r in rows})
        L += ["", "Passkey: answer-token accuracy by length (mean over depths and samples; exact = every answer "
                  "token right):", "", "| length | " + " | ".join(f"{n} acc / exact" for n in pk) + " |",
              "|---|" + "---|" * len(pk)]
        for n_tok in lengths:
            cells = []
            for rows in pk.values():
                at = [r for r in rows if int(r["length"]) == n_tok]
                acc = sum(float(r["accuracy"]) for r in at) / len(at) if at else float("nan")
                exact = sum(1 for r in at if r.get("exact")) / len(at) if at else float("nan")
                cells.append(f"{acc:.2f} / {exact:.2f}")
            L.append(f"| {n_tok} | " + " | ".join(cells) + " |")
    return "\n".join(L) + "\n" if L else ""


def plots(out, names, labels, run, say):
    """Each task's plot with every run that has results, in `names` order. Returns the PNGs written."""
    written = []
    for task, script, png in TASKS:
        have = [(n, labels.get(n, n)) for n in names
                if os.path.isfile(os.path.join(out, "eval", f"{task}-{n}.jsonl"))]
        if not have:
            continue
        cmd = [PY, os.path.join(ROOT, script)] + [os.path.join(out, "eval", f"{task}-{n}.jsonl") for n, _ in have]
        cmd += ["--labels", ",".join(label for _, label in have), "--out", os.path.join(out, png)]
        if task == "loss-by-position":
            cmd += ["--title", "Held-out loss by position, final checkpoints"]
        rc = run(f"plot-{task}", cmd, os.path.join(out, "logs", f"plot-{task}.log"))
        if rc == 0:
            written.append(png)
        else:
            say(f"plot {task} exited with {rc} (logs/plot-{task}.log)")
    return written


def label_of(run):
    if run["name"] == "bf16":
        return "bf16"
    return run["name"].replace("fp8-", "fp8 ").replace("-attention", " + fp8.attention")


def report_evals(out, run, say):
    """The plots and OUT/evals.md from what OUT/eval holds; appends the tables to OUT/summary.md. Returns the text."""
    study = json.load(open(os.path.join(out, "study.json")))
    names = [r["name"] for r in study["runs"]]
    labels = {r["name"]: label_of(r) for r in study["runs"]}
    text = tables(out, names)
    if not text:
        return ""
    pngs = plots(out, names, labels, run, say)
    text = "\n## End-of-run evals (final checkpoints)\n" + text + "".join(f"\n![{p}]({p})\n" for p in pngs)
    with open(os.path.join(out, "evals.md"), "w") as f:
        f.write(text.lstrip("\n"))
    summary = os.path.join(out, "summary.md")
    if os.path.isfile(summary):
        with open(summary, "a") as f:
            f.write(text)
    return text


def run_logged(label, cmd, log_path, timeout=900):
    """Runs cmd from the checkout's root with its output in log_path; returns its exit code."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        try:
            return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            log.write(f"{label}: killed after {timeout} s\n")
            return 124


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = os.path.abspath(sys.argv[1])
    if not os.path.isfile(os.path.join(out, "study.json")):
        print(f"fp8_parity_evals.py: error: {out} holds no study.json (bench/fp8_loss_parity.py --out)",
              file=sys.stderr)
        sys.exit(2)
    text = report_evals(out, run_logged, lambda m: print(f"fp8_parity_evals: {m}", flush=True))
    print(text or "no end-of-run eval results in " + os.path.join(out, "eval"))


if __name__ == "__main__":
    main()
