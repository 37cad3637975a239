#!/usr/bin/env python3
"""A real model's context extended, end to end, in one command (README "Does the model use its context?").

  python3 bench/context_extension.py OUT_DIR [--tiny] [--build DIR] [--time-budget S] [--eval-np N] [--stage STAGE]

1. corpus     the .py files of this python3's standard library, then of its site-packages, one document each,
              sorted by path (a package's files stay together: a 32K window holds related code), without
              duplicates, empty files or files that are not UTF-8; up to 120 MB (the profile's corpus_mb).
              OUT/corpus.jsonl.
2. tokenizer  a byte-level BPE (the `tokenizers` package) of model.vocab_size tokens, <|endoftext|> the
              delimiter, trained on an evenly spread sample of the corpus. OUT/tokenizer.json.
3. shards     launch/prepare_data.py: OUT/data/train_*.bin and val_*.bin (the first documents held out).
4. pretrain   configs/extend-4k.yaml from scratch at 4K tokens on one rank (launch/train.sh).
5. yarn-0     the pretrained weights saved again under configs/extend-32k.yaml's RoPE scaling (one step at lr 0):
              the scaling alone, without training at the longer context.
6. extend     configs/extend-32k.yaml: train.init_from the pretrained checkpoint, YaRN x8, 32K tokens on a cp=2
              zigzag ring (launch/train.sh; on one GPU the two ranks share it through the mpi communicator).
7. eval       `ringtrain eval` on --eval-np ranks, each task followed by its plot: loss by position over 32K
              held-out windows (the pretrained model without scaling, yarn-0, extended; OUT/loss_by_position.png),
              passkey cases in held-out code (launch/make_needles.py; the same three; OUT/passkey.png) and
              RULER-style cases (launch/make_ruler.py; extended, then pretrained; OUT/ruler.png).
8. summary    OUT/summary.md: every step's wall time, the data, the runs' losses and speeds, and each eval's
              numbers as tables; OUT/results.tar.gz: the logs, metrics and eval results (no data or checkpoints).

Training steps run under a deadline (--pretrain-seconds, --extend-seconds, both shortened to fit --time-budget,
the driver's whole wall time): past it the trainer gets SIGTERM, finishes its step, saves and stops, and the run
goes on from that checkpoint (the summary says how many steps ran). Every other command has a hard timeout. On
SIGTERM the driver writes the summary of what ran and stops. --stage data runs steps 1-3 (no GPU, no build
needed: it can run while ringtrain builds), --stage train steps 4-8 on the data stage's OUT_DIR.
--tiny runs the same steps on the CPU in under a minute (2 layers of d 64, 256 -> 1024 tokens, a 512-token
vocabulary, 2 CPU ranks for the ring): the check that the command works before it is run on a GPU.
OUT_DIR must not exist or be empty. Needs numpy, tokenizers and matplotlib (launch/install-deps.sh --prepare-data).
"""
import argparse
import datetime
import hashlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
EOT = "<|endoftext|>"

# What differs between the H200 run and the CPU check. The evals run with full checkpointing: a forward keeps only
# each block's input (the arena of 8 x 32K tokens with every activation would be 80 GiB), and RULER's cases run at
# once (ruler_batch), as few forwards as the longest answer (ruler_max_new: vt's five names take 22 tokens).
# model_sets reach every command that reads the pretraining config (the extension takes its model from the
# checkpoint); rope_sets every command that reads the extension's.
PROFILES = {
    "h200": dict(corpus_mb=120, tokenizer_mb=24, vocab=16384, val_tokens=600_000,
                 model_sets=[], rope_sets=[], short=4096, long=32768,
                 pretrain_sets=["train.steps=800"], pretrain_seconds=150,
                 extend_sets=["train.steps=40"], extend_seconds=90, reserve_after_extend=110,
                 eval_sets=["train.batch_size=8", "train.eval_batches=1", "train.checkpointing=full"],
                 needle_lengths="4096,8192,16384,32768", needle_depths="0,0.25,0.5,0.75,1", needle_samples=2,
                 ruler_lengths="4096,16384,32768", ruler_tasks="niah_single,niah_multikey,niah_multivalue,vt,fwe",
                 ruler_samples=1, ruler_max_new=22, ruler_batch=15),
    "tiny": dict(corpus_mb=1.5, tokenizer_mb=1.5, vocab=512, val_tokens=20_000,
                 model_sets=["model.n_layer=2", "model.d_model=64", "model.n_head=1", "model.n_kv_head=1",
                             "model.d_ff=256", "model.vocab_size=512", "device=cpu"],
                 rope_sets=["model.rope_scaling.factor=4", "model.rope_scaling.original_max_position_embeddings=256",
                            "device=cpu"],
                 short=256, long=1024,
                 pretrain_sets=["train.steps=40", "train.batch_size=8", "train.eval_every=20", "optim.warmup_steps=5",
                                "log.every=10"],
                 pretrain_seconds=120,
                 extend_sets=["train.steps=6", "optim.warmup_steps=1", "log.every=2"], extend_seconds=60,
                 reserve_after_extend=60,
                 eval_sets=["train.batch_size=4", "train.eval_batches=1", "train.checkpointing=full"],
                 needle_lengths="256,512,1024", needle_depths="0,0.5,1", needle_samples=1,
                 ruler_lengths="1024", ruler_tasks="niah_single,vt", ruler_samples=1, ruler_max_new=4,
                 ruler_batch=4),
}


class Driver:
    def __init__(self, args, profile):
        self.args, self.p, self.out = args, profile, os.path.abspath(args.out)
        self.logs = os.path.join(self.out, "logs")
        self.steps = []   # {name, seconds, gpu, status, note}
        self.facts = {}   # numbers for the summary
        self.child = None  # the command running now
        self.start = time.time()
        self.env = dict(os.environ, BUILD_DIR=os.path.abspath(args.build), OMPI_ALLOW_RUN_AS_ROOT="1",
                        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1")

    # ---- running things ----
    def run(self, name, cmd, deadline=None, check=True, timeout=600):
        """Runs cmd (its output to logs/<name>.log); past `deadline` seconds sends SIGTERM (train.sh: save and stop),
        then a second one 90 s later; past `timeout` seconds (after the deadline's, if any) SIGKILL. Returns (exit
        code, whether the deadline stopped it); check: a code other than 0 (or 143 after the deadline) ends the
        driver."""
        log = os.path.join(self.logs, name + ".log")
        with open(log, "a") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env,
                                    start_new_session=True)
            self.child = proc
            start, termed = time.time(), 0
            while proc.poll() is None:
                time.sleep(0.5)
                waited = time.time() - start
                if deadline and termed == 0 and waited > deadline:
                    print(f"context_extension: {name}: {deadline:.0f} s deadline; asking it to save and stop",
                          flush=True)
                    proc.send_signal(signal.SIGTERM)
                    termed = 1
                elif deadline and termed == 1 and waited > deadline + 90:
                    proc.send_signal(signal.SIGTERM)
                    termed = 2
                if waited > (deadline or 0) + timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    self.fail(f"{name} ran past its {timeout:.0f} s timeout and was killed (log: {log})")
            self.child = None
        rc = proc.returncode
        if check and not (rc == 0 or (termed and rc == 128 + signal.SIGTERM)):
            tail = open(log, errors="replace").read().splitlines()[-15:]
            self.fail(f"{name} exited with {rc}; the end of {log}:\n  " + "\n  ".join(tail))
        return rc, bool(termed)

    def step(self, name, fn, gpu=True):
        print(f"context_extension: {name} ...", flush=True)
        t0 = time.time()
        note = fn() or ""
        seconds = time.time() - t0
        self.steps.append(dict(name=name, seconds=round(seconds, 1), gpu=gpu, note=note))
        print(f"context_extension: {name} done in {seconds:.1f} s {note}", flush=True)
        self.save_state()

    def fail(self, msg):
        self.facts["failed"] = msg
        self.save_state()
        self.write_summary()
        self.archive()
        print(f"context_extension: error: {msg}", file=sys.stderr)
        sys.exit(1)

    def save_state(self):
        with open(os.path.join(self.out, "steps.json"), "w") as f:
            json.dump(dict(steps=self.steps, facts=self.facts), f, indent=1)

    def left(self):
        """Seconds left of --time-budget (a large number without one)."""
        return self.args.time_budget - (time.time() - self.start) if self.args.time_budget else 1e9

    def sets(self, items):
        return [a for s in items for a in ("--set", s)]

    def ringtrain(self):
        return os.path.join(os.path.abspath(self.args.build), "ringtrain")

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    # ---- 1-3: data ----
    def corpus(self):
        roots = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]]
        cap, seen, size, docs = int(self.p["corpus_mb"] * 1e6), set(), 0, 0
        with open(self.path("corpus.jsonl"), "w") as out:
            for root in dict.fromkeys(roots):
                files = []
                for directory, subdirs, names in os.walk(root):
                    subdirs[:] = sorted(d for d in subdirs if d != "__pycache__" and
                                        (root != roots[0] or d not in ("site-packages", "dist-packages")))
                    files += [os.path.join(directory, n) for n in names if n.endswith(".py")]
                for path in sorted(files):
                    try:
                        raw = open(path, "rb").read()
                        text = raw.decode("utf-8")
                    except (OSError, UnicodeDecodeError):
                        continue
                    digest = hashlib.sha1(raw).digest()
                    if not text.strip() or "\0" in text or digest in seen or len(raw) > 2_000_000:
                        continue
                    if size + len(raw) > cap:
                        break
                    seen.add(digest)
                    out.write(json.dumps({"text": text}) + "\n")
                    size, docs = size + len(raw), docs + 1
        self.facts["corpus"] = dict(roots=roots, documents=docs, bytes=size)
        # the held-out documents come first (prepare_data.py): their start is the passkey haystack
        with open(self.path("corpus.jsonl")) as f, open(self.path("haystack.txt"), "w") as h:
            written = 0
            for line in f:
                if written > self.p["long"] * 8:
                    break
                text = json.loads(line)["text"]
                h.write(text + "\n")
                written += len(text)
        return f"{docs} documents, {size / 1e6:.1f} MB"

    def tokenizer(self):
        try:
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        except ImportError:
            self.fail("the `tokenizers` package is missing; run launch/install-deps.sh --prepare-data")
        lines = open(self.path("corpus.jsonl")).readlines()
        total = sum(len(s) for s in lines)
        stride = max(1, round(total / (self.p["tokenizer_mb"] * 1e6)))
        sample = [json.loads(s)["text"] for s in lines[::stride]]
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=self.p["vocab"], special_tokens=[EOT], min_frequency=2,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(sample, trainer=trainer)
        tok.save(self.path("tokenizer.json"))
        self.facts["tokenizer"] = dict(vocab=tok.get_vocab_size(), trained_on_mb=round(sum(map(len, sample)) / 1e6, 1))
        return f"vocab {tok.get_vocab_size()}, trained on {sum(map(len, sample)) / 1e6:.1f} MB"

    def shards(self):
        self.run("prepare_data", [PY, "launch/prepare_data.py", "--tokenizer", self.path("tokenizer.json"),
                                  "--out", self.path("data"), "--val-tokens", str(self.p["val_tokens"]),
                                  "--workers", str(self.args.data_workers), self.path("corpus.jsonl")])
        meta = json.load(open(self.path("data", "meta.json")))
        train = sum(s["tokens"] for s in meta["train_shards"])
        val = sum(s["tokens"] for s in meta["val_shards"])
        self.facts["shards"] = dict(train_tokens=train, val_tokens=val)
        return f"{train} training tokens, {val} held out"

    # ---- 4-6: training ----
    def data_sets(self, length):
        return [f"data.path={self.path('data')}/train_*.bin", f"data.eval_path={self.path('data')}/val_*.bin",
                f"data.seq_len={length}"]

    def train(self, name, config, sets, deadline):
        rc, termed = self.run(name, ["launch/train.sh", config] + self.sets(sets), deadline=deadline)
        run_dir = next(s.split("=", 1)[1] for s in sets if s.startswith("train.run_dir="))
        ckpts = sorted(os.listdir(os.path.join(run_dir, "checkpoints", "main")),
                       key=lambda d: int(d.split("_")[1]) if d.startswith("step_") else -1)
        metrics = [json.loads(s) for s in open(os.path.join(run_dir, "metrics.jsonl")) if s.strip()]
        steps = [m for m in metrics if "loss" in m and m.get("loss") is not None]
        evals = [m for m in metrics if m.get("eval_loss") is not None]
        speed = sorted(m["tok_per_s"] for m in steps[1:] if m.get("tok_per_s")) or [0]
        mfu = sorted(m["mfu"] for m in steps[1:] if m.get("mfu") is not None) or [0]
        step_ms = sorted(m["ms_per_step"] for m in steps[1:] if m.get("ms_per_step")) or [0]
        comm_ms = sorted(m.get("comm_exposed_ms") or 0 for m in steps[1:]) or [0]
        fact = dict(checkpoint=os.path.join(run_dir, "checkpoints", "main", ckpts[-1]), stopped_by_deadline=termed,
                    steps=int(ckpts[-1].split("_")[1]), last_loss=round(steps[-1]["loss"], 4) if steps else None,
                    eval_loss=evals[-1]["eval_loss"] if evals else None, tok_per_s=speed[len(speed) // 2],
                    mfu=mfu[len(mfu) // 2], ms_per_step=round(step_ms[len(step_ms) // 2], 1),
                    comm_exposed_ms=round(comm_ms[len(comm_ms) // 2], 1),
                    losses=[(m["step"], m["loss"]) for m in steps])
        self.facts[name] = fact
        return (f"{fact['steps']} steps{' (deadline)' if termed else ''}, loss {fact['last_loss']}, "
                f"{fact['tok_per_s']:.0f} tok/s")

    def pretrain(self):
        sets = self.p["model_sets"] + self.data_sets(self.p["short"]) + self.p["pretrain_sets"] + [
            f"train.run_dir={self.path('runs', 'pretrain')}"]
        reserve = 25 + self.p["extend_seconds"] + self.p["reserve_after_extend"]  # yarn-0, the extension, the rest
        deadline = min(self.p["pretrain_seconds"], self.left() - reserve)
        if self.left() - reserve < 30:
            self.fail(f"{self.left():.0f} s left of --time-budget: too little to pretrain ({reserve} s are kept for "
                      "the steps after it)")
        return self.train("pretrain", "configs/extend-4k.yaml", sets, deadline)

    def extend_sets(self, run, init):
        return self.p["rope_sets"] + self.data_sets(self.p["long"]) + [f"train.init_from={init}",
                                                                        f"train.run_dir={run}"]

    def yarn0(self):
        sets = self.extend_sets(self.path("runs", "yarn0"), self.facts["pretrain"]["checkpoint"]) + [
            "parallel.cp=1", "train.steps=1", "optim.lr=0", "optim.min_lr=0", "optim.warmup_steps=0",
            "train.eval_every=0", "train.batch_size=1"]
        return self.train("yarn0", "configs/extend-32k.yaml", sets, None)

    def extend(self):
        sets = self.extend_sets(self.path("runs", "extend"), self.facts["pretrain"]["checkpoint"]) + \
            self.p["extend_sets"]
        deadline = min(self.p["extend_seconds"], self.left() - self.p["reserve_after_extend"])
        if self.left() - self.p["reserve_after_extend"] < 20:
            self.fail(f"{self.left():.0f} s left of --time-budget: too little to extend")
        return self.train("extend", "configs/extend-32k.yaml", sets, deadline)

    # ---- 7: eval ----
    def models(self):
        """(label, config, sets, checkpoint) of the three models, evaluated at the long length."""
        short, long = count(self.p["short"]), self.p["long"]
        base = (f"pretrained at {short} (no scaling)", "configs/extend-4k.yaml",
                self.p["model_sets"] + self.data_sets(long), self.facts["pretrain"]["checkpoint"])
        yarn0 = (f"pretrained + YaRN (untrained at {count(long)})", "configs/extend-32k.yaml",
                 self.p["rope_sets"] + self.data_sets(long), self.facts["yarn0"]["checkpoint"])
        ext = (f"extended: YaRN + {self.facts['extend']['steps']} steps at {count(long)}", "configs/extend-32k.yaml",
               self.p["rope_sets"] + self.data_sets(long), self.facts["extend"]["checkpoint"])
        return {"pretrained": base, "yarn0": yarn0, "extended": ext}

    def evaluate(self, key, task, extra, cases=None):
        label, config, sets, ckpt = self.models()[key]
        n = self.args.eval_np
        sets = sets + [f"parallel.cp={n}", "train.init_from="] + self.p["eval_sets"] + extra
        out = self.path("eval", f"{task}-{key}.jsonl")
        cmd = [self.ringtrain(), "eval", config, "--checkpoint", ckpt, "--task", task, "--out", out,
               "--overwrite"] + self.sets(sets)  # a rerun of the driver replaces its results
        if cases:
            cmd += ["--cases", cases]
        if n > 1:
            cmd = ["mpirun", "-np", str(n), "--oversubscribe"] + cmd
        self.run(f"eval-{task}-{key}", cmd, timeout=180)
        return [json.loads(s) for s in open(out) if s.strip()]

    def cases(self):
        os.makedirs(self.path("eval"), exist_ok=True)
        long, tok = self.p["long"], ["--tokenizer", self.path("tokenizer.json")]
        self.run("make_needles", [PY, "launch/make_needles.py", "--out", self.path("eval", "passkey")] + tok + [
            "--haystack", self.path("haystack.txt"), "--kind", "passkey", "--max-length", str(long),
            "--lengths", self.p["needle_lengths"], "--depths", self.p["needle_depths"],
            "--samples", str(self.p["needle_samples"])])
        self.run("make_ruler", [PY, "launch/make_ruler.py", "--out", self.path("eval", "ruler")] + tok + [
            "--max-length", str(long), "--lengths", self.p["ruler_lengths"], "--tasks", self.p["ruler_tasks"],
            "--samples", str(self.p["ruler_samples"]), "--max-new", str(self.p["ruler_max_new"])])

    # ---- 7-8: each eval on every model, then its plot (so an outer timeout keeps the plots made) ----
    def eval_task(self, task, keys, extra, cases, plot, png, title=None):
        """Evaluates `keys` in that order, then plots those done in the order of the three models."""
        res, note = self.facts.setdefault("eval", {}), ""
        short = {"loss-by-position": "lbp"}.get(task, task)
        for key in keys:
            if task == "ruler" and self.left() < 40:
                note = f"; {key} skipped: {self.left():.0f} s left of --time-budget"
                break
            res[f"{short}-{key}"] = self.evaluate(key, task, extra, cases)
            self.save_state()
        done = [k for k in ("pretrained", "yarn0", "extended") if f"{short}-{k}" in res]
        if not done:
            return note.lstrip("; ")
        files = [self.path("eval", f"{task}-{k}.jsonl") for k in done]
        cmd = [PY, plot] + files + ["--labels", ",".join(self.models()[k][0] for k in done), "--out", self.path(png)]
        self.run(f"plot-{task}", cmd + (["--title", title] if title else []))
        return f"{png} {os.path.getsize(self.path(png)) // 1024} KB" + note

    def eval_loss(self):
        return self.eval_task("loss-by-position", ("pretrained", "yarn0", "extended"), [], None,
                              "launch/plot_loss_by_position.py", "loss_by_position.png",
                              f"Held-out loss by position (Python code, {count(self.p['long'])} windows)")

    def eval_passkey(self):
        return self.eval_task("needle", ("pretrained", "yarn0", "extended"), [], self.path("eval", "passkey"),
                              "launch/plot_needles.py", "passkey.png")

    def eval_ruler(self):  # the extended model first: the one to keep if time runs short
        return self.eval_task("ruler", ("extended", "pretrained"), [f"train.batch_size={self.p['ruler_batch']}"],
                              self.path("eval", "ruler"), "launch/plot_ruler.py", "ruler.png")

    def write_summary(self):
        f, L = self.facts, []
        L += [f"# Context extension: pretrain at {self.p['short']} tokens, extend to {self.p['long']} with YaRN on a "
              f"cp=2 ring", "",
              f"- date: {f.get('date', '')}", f"- GPU: {f.get('gpu', '')}", f"- commit: {self.args.commit}",
              "- command: " + ", then ".join(f"`{c}`" for c in f.get("command", [])), ""]
        if f.get("failed"):
            L += [f"**Stopped early:** {f['failed']}", ""]
        L += ["| step | wall s | on the GPU | note |", "|---|---|---|---|"]
        L += [f"| {s['name']} | {s['seconds']} | {'yes' if s['gpu'] else 'no (CPU)'} | {s['note']} |"
              for s in self.steps]
        for name in ("pretrain", "yarn0", "extend"):
            r = f.get(name)
            if r:
                stop = " (stopped by the deadline)" if r["stopped_by_deadline"] else ""
                L += ["", f"{name}: {r['steps']} steps{stop}, last train loss {r['last_loss']}, last eval loss "
                      f"{r['eval_loss']}, median "
                      f"{r['tok_per_s']:.0f} tok/s, {r.get('ms_per_step')} ms/step (exposed communication "
                      f"{r.get('comm_exposed_ms')} ms), MFU {100 * r['mfu']:.1f}%, checkpoint `{r['checkpoint']}`"]
        ev = f.get("eval", {})
        keys = [k for k in ("pretrained", "yarn0", "extended") if f"lbp-{k}" in ev]
        if keys:
            L += ["", "Loss by position (mean loss of the targets predicted from positions [lo, hi)):", "",
                  "| positions | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
            rows = {}
            for k in keys:
                for b in ev[f"lbp-{k}"]:
                    rows.setdefault((b["lo"], b["hi"]), {})[k] = b["mean_loss"]
            for (lo, hi), v in sorted(rows.items()):
                if hi >= 64:
                    L.append(f"| {lo}-{hi} | " + " | ".join(f"{v[k]:.3f}" if k in v else "" for k in keys) + " |")
        for task, metric in (("needle", "accuracy"), ("ruler", "score")):
            keys = [k for k in ("pretrained", "yarn0", "extended") if f"{task}-{k}" in ev]
            if not keys:
                continue
            group = "depths" if task == "needle" else "tasks"
            L += ["", f"{task} ({metric}, mean over {group} and samples) by length:", "",
                  "| model | " + " | ".join(str(n) for n in sorted({r['length'] for r in ev[f'{task}-{keys[0]}']}))
                  + " |", "|---|" + "---|" * len({r['length'] for r in ev[f'{task}-{keys[0]}']})]
            for k in keys:
                by = {}
                for r in ev[f"{task}-{k}"]:
                    by.setdefault(r["length"], []).append(float(r[metric]))
                L.append(f"| {k} | " + " | ".join(f"{sum(v) / len(v):.2f}" for _, v in sorted(by.items())) + " |")
            if task == "ruler":
                for k in keys:
                    cells = {}
                    for r in ev[f"ruler-{k}"]:
                        cells.setdefault((r["task"], r["length"]), []).append(float(r["score"]))
                    L += ["", f"RULER, {k} (task x length, score 0-100):", ""]
                    lengths = sorted({n for _, n in cells})
                    L += ["| task | " + " | ".join(map(str, lengths)) + " |", "|---|" + "---|" * len(lengths)]
                    for t in dict.fromkeys(t for t, _ in cells):
                        L.append(f"| {t} | " + " | ".join(f"{sum(cells[(t, n)]) / len(cells[(t, n)]):.0f}"
                                                          if (t, n) in cells else "" for n in lengths) + " |")
        with open(self.path("summary.md"), "w") as out:
            out.write("\n".join(L) + "\n")

    def archive(self):
        """OUT/results.tar.gz: the logs, configs, metrics, eval JSONL/CSV/MD, plots and summary (no data, cases or
        checkpoints)."""
        with tarfile.open(self.path("results.tar.gz"), "w:gz") as tar:
            for directory, subdirs, names in os.walk(self.out):
                rel = os.path.relpath(directory, self.out)
                subdirs[:] = [d for d in subdirs if d not in ("data", "checkpoints", "passkey", "ruler", "tensorboard")]
                for n in names:
                    if n.endswith((".log", ".jsonl", ".csv", ".md", ".png", ".yaml", ".json")) and \
                            not (rel == "." and n in ("corpus.jsonl", "tokenizer.json")):
                        tar.add(os.path.join(directory, n), arcname=os.path.join(rel, n))


def count(n):
    """4096 -> '4K'."""
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip() or "none (CPU)"
    except (OSError, subprocess.SubprocessError):
        return "none (CPU)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output directory (new or empty; for --stage train, the data stage's)")
    ap.add_argument("--tiny", action="store_true", help="the CPU check: a tiny model, tiny lengths, a few minutes")
    ap.add_argument("--stage", choices=["all", "data", "train"], default="all",
                    help="data: steps 1-3 only; train: steps 4-8 on OUT's data; all (default): both")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the build directory holding ringtrain")
    ap.add_argument("--commit", default="", help="recorded in the summary (default: git rev-parse of this checkout)")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds this command may take in all: the training deadlines shrink to fit (0: none)")
    ap.add_argument("--eval-np", type=int, default=1, help="ranks for the evals (parallel.cp; 1: one rank, fastest "
                                                           "where ranks would share a GPU)")
    ap.add_argument("--data-workers", type=int, default=os.cpu_count() or 1, help="tokenizing processes")
    ap.add_argument("--pretrain-seconds", type=float, help="deadline of the pretraining (default: the profile's)")
    ap.add_argument("--extend-seconds", type=float, help="deadline of the extension (default: the profile's)")
    args = ap.parse_args()
    profile = dict(PROFILES["tiny" if args.tiny else "h200"])
    for key in ("pretrain_seconds", "extend_seconds"):
        if getattr(args, key) is not None:
            profile[key] = getattr(args, key)
    err = lambda msg: sys.exit(f"context_extension.py: error: {msg}")  # noqa: E731
    state = os.path.join(args.out, "steps.json")
    if args.stage == "train":
        if not os.path.exists(state) or "shards" not in json.load(open(state))["facts"]:
            err(f"'{args.out}' holds no finished data stage; run --stage data into it first (or --stage all)")
    elif os.path.exists(args.out) and (not os.path.isdir(args.out) or os.listdir(args.out)):
        err(f"'{args.out}' exists and is not an empty directory; give a new one")
    if args.stage != "data" and not os.access(os.path.join(args.build, "ringtrain"), os.X_OK):
        err(f"no ringtrain in '{args.build}'; build it first (launch/build.sh --target ringtrain) or give --build DIR")
    if args.eval_np < 1 or args.data_workers < 1:
        err("--eval-np and --data-workers must be >= 1")
    if not args.commit:
        git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        args.commit = git.stdout.strip() or "unknown"
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    d = Driver(args, profile)
    if args.stage == "train":
        saved = json.load(open(state))
        d.steps, d.facts = saved["steps"], saved["facts"]
    d.facts.setdefault("command", [])
    d.facts["command"].append("python3 bench/context_extension.py " + " ".join(sys.argv[1:]))
    d.facts.update(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), gpu=gpu_name())

    def on_term(signum, frame):  # an outer timeout: stop the command running, keep what is done
        if d.child is not None and d.child.poll() is None:
            os.killpg(d.child.pid, signal.SIGKILL)
        d.fail(f"stopped by signal {signum} during the step after {d.steps[-1]['name'] if d.steps else 'none'}")
    signal.signal(signal.SIGTERM, on_term)
    if args.stage != "train":
        d.step("corpus", d.corpus, gpu=False)
        d.step("tokenizer", d.tokenizer, gpu=False)
        d.step("shards", d.shards, gpu=False)
    if args.stage != "data":
        d.step("pretrain", d.pretrain)
        d.step("yarn0", d.yarn0)
        d.step("extend", d.extend)
        d.step("cases", d.cases, gpu=False)
        d.step("eval: loss by position", d.eval_loss)
        d.step("eval: passkey", d.eval_passkey)
        d.step("eval: RULER", d.eval_ruler)
    d.write_summary()
    d.archive()
    print(f"context_extension: wrote {d.path('summary.md')}" +
          (", the three PNGs" if args.stage != "data" else "") + f" and {d.path('results.tar.gz')}")


if __name__ == "__main__":
    main()
