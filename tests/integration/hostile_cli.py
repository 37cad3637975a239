#!/usr/bin/env python3
"""A hostile user's options to `ringtrain generate`, `eval` and `plan` (issue 43, rows 1-4 and 8-11), through the
real binary on 1 and 2 CPU ranks, on a 2-step checkpoint of configs/tiny.yaml trained here:
  limits    (rows 1, 2) --max-new-tokens near 2^62 / 2^63 and prompt + new tokens past 2^30 end with exit 2 naming
            the option, on 1 and 2 ranks (no segfault, no hang); plan refuses the same counts, and at the largest
            count both accept they agree on the cache rows per rank;
  outputs   (rows 3, 4) an existing --out of generate / eval loss-by-position / eval needle is refused naming
            --overwrite and left as it was (a checkpoint's model.safetensors included), --overwrite replaces it;
            an --out that is a directory is refused before the eval runs and leaves no X.csv; a full disk
            (RLIMIT_FSIZE) leaves none of the outputs and no temporaries, exit 2, in eval, generate and export-hf;
  contracts (rows 8-11) generate's stdout is one JSON line under parallel.cp_a2a: auto on 2 ranks; --eos-id
            outside the vocabulary and --by document without documents are refused naming the range / the cause;
            an HF model directory as --checkpoint names import-hf; a directory as --out, --prompt-ids, plan
            --doc-lengths says so; eval --dump-logits on 2 ranks and log.metrics_file in a missing subdirectory
            exit 2 at validation, printed once, with no source location.

  hostile_cli.py --ringtrain BIN --mpirun MPIRUN --source-dir ROOT limits|outputs|contracts
"""
import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

failures = []
LIMIT_S = 120  # any one command; a hang ends here (exit 124 from timeout)
SOURCE_LOCATION = re.compile(r"\.(cpp|h|cu):[0-9]+\]")


def check(cond, what, output=""):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
        if output:
            print("      " + output.strip().replace("\n", "\n      ")[-3000:], flush=True)


class Env:
    def __init__(self, args, tmp):
        self.bin, self.mpirun, self.tmp = args.ringtrain, args.mpirun, tmp
        self.config = os.path.join(args.source_dir, "configs", "tiny.yaml")
        self.cpu = ["--set", "device=cpu"]
        run = os.path.join(tmp, "run")
        r = self.run(["train", self.config, *self.cpu, "--set", "parallel.cp=1", "--set", "train.steps=2",
                      "--set", "optim.warmup_steps=1", "--set", "train.eval_every=0", "--set", f"train.run_dir={run}"])
        if r.returncode != 0:
            print(r.stdout)
            sys.exit("training the 2-step checkpoint failed")
        self.ckpt = os.path.join(run, "checkpoints", "main", "step_2")

    def run(self, argv, ranks=1, file_limit=None, env=None):
        """ringtrain argv on `ranks` ranks (1: no mpirun); stdout and stderr apart and together."""
        cmd = [self.bin] + argv
        if ranks > 1:
            cmd = [self.mpirun, "-np", str(ranks), "--oversubscribe"] + cmd
        e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PMIX_MCA_gds="hash")
        e.update(env or {})

        def limits():
            if file_limit is not None:  # a full disk: writes past the limit fail with EFBIG (SIGXFSZ ignored)
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=LIMIT_S,
                               env=e, preexec_fn=limits, cwd=self.tmp)
            p.both = p.stdout + p.stderr
        except subprocess.TimeoutExpired as t:
            p = subprocess.CompletedProcess(cmd, 124, t.stdout or "", t.stderr or "")
            p.both = f"(no answer within {LIMIT_S} s)"
        return p

    def generate(self, extra, ranks=1, **kw):
        return self.run(["generate", self.config, *self.cpu, "--checkpoint", self.ckpt, *extra], ranks, **kw)

    def eval(self, extra, ranks=1, **kw):
        return self.run(["eval", self.config, *self.cpu, "--checkpoint", self.ckpt, *extra], ranks, **kw)


def refused(p, names, what):
    """Exit 2, the error printed once, naming each of `names`, no source location, no signal."""
    errors = p.both.count("ringtrain: error")
    ok = p.returncode == 2 and errors == 1 and all(n in p.both for n in names) and \
        not SOURCE_LOCATION.search(p.both) and "Segmentation" not in p.both and "signal" not in p.both
    check(ok, f"{what}: exit 2 (got {p.returncode}), one error line (got {errors}) naming {names}", p.both)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def entries(d):
    return sorted(os.listdir(d))


# ---- rows 1, 2 ----
def case_limits(env):
    for ranks in (1, 2):
        for n in ("4611686018427387904", "9223372036854775807", "-1"):
            p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", n], ranks)
            refused(p, ["--max-new-tokens"], f"generate --max-new-tokens {n} on {ranks} rank(s)")
        p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", str(2**30 - 2)], ranks)
        refused(p, ["--max-new-tokens", "1073741821"], f"generate: prompt 3 + 2^30 - 2 new tokens on {ranks} rank(s)")
        p = env.generate(["--prompt", "1,2,3", "--prefill-chunk", str(2**62)], ranks)
        refused(p, ["--prefill-chunk"], f"generate --prefill-chunk 2^62 on {ranks} rank(s)")
    plan = ["plan", env.config, *env.cpu]
    refused(env.run(plan + ["--generate-context", "9223372036854775807"]), ["--generate-context"],
            "plan --generate-context 2^63 - 1")
    refused(env.run(plan + ["--generate-context", str(2**62)]), ["--generate-context"], "plan --generate-context 2^62")
    refused(env.run(plan + ["--generate-context", "3", "--max-new-tokens", str(2**62)]), ["--max-new-tokens"],
            "plan --max-new-tokens 2^62")
    refused(env.run(plan + ["--generate-context", "3", "--max-new-tokens", str(2**30 - 2)]),
            ["--max-new-tokens", "1073741821"], "plan: the same prompt + new tokens generate refuses")
    # The largest count both accept: plan's cache rows per rank are generate's (cp = 2, ceil((3 + N) / 2) + 1).
    n = 2**30 - 3
    p = env.run(plan + ["--json", "--generate-context", "3", "--max-new-tokens", str(n)])
    rows = None
    try:
        rows = json.loads(p.stdout.splitlines()[0])["generate"]["cache_rows_per_rank"]
    except (ValueError, KeyError, IndexError):
        pass
    want = (3 + n + 1) // 2 + 1
    check(p.returncode == 0 and rows == want, f"plan at prompt 3 + {n}: exit 0 and {want} cache rows per rank "
                                              f"(got exit {p.returncode}, {rows})", p.both)
    p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", str(n), "--device-memory-gib", "0.001"], 2)
    check(p.returncode == 2 and f"({want} rows per rank)" in p.both,
          f"generate at prompt 3 + {n} on 2 ranks: refused for memory, counting the plan's {want} rows", p.both)


# ---- rows 3, 4 ----
def case_outputs(env, source_dir):
    t = env.tmp
    out = os.path.join(t, "result.json")
    with open(out, "w") as f:
        f.write("precious\n")
    p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", "2", "--out", out])
    refused(p, ["--out", "--overwrite", "already exists"], "generate --out onto an existing file")
    check(open(out).read() == "precious\n", "generate --out: the existing file is untouched")
    p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", "2", "--out", out, "--overwrite"])
    check(p.returncode == 0 and json.load(open(out))["new_ids"], "generate --out --overwrite replaces it", p.both)
    model = os.path.join(env.ckpt, "model.safetensors")
    before = sha(model)
    for ranks in (1, 2):
        p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", "2", "--out", model], ranks)
        refused(p, ["--out", "--overwrite"], f"generate --out CK/model.safetensors on {ranks} rank(s)")
        p = env.eval(["--task", "loss-by-position", "--out", os.path.join(t, "run", "metrics.jsonl")], ranks)
        refused(p, ["--out", "--overwrite"], f"eval loss-by-position --out RUN/metrics.jsonl on {ranks} rank(s)")
    check(sha(model) == before, "the checkpoint's model.safetensors is untouched")
    lbp = os.path.join(t, "lbp.jsonl")
    with open(lbp, "w") as f:
        f.write("old\n")
    p = env.eval(["--task", "loss-by-position", "--out", lbp], 2)
    refused(p, ["--out", "--overwrite"], "eval loss-by-position --out onto an existing file (2 ranks)")
    check(open(lbp).read() == "old\n" and not os.path.exists(os.path.join(t, "lbp.csv")),
          "eval loss-by-position: the existing .jsonl is untouched and no .csv was written")
    p = env.eval(["--task", "loss-by-position", "--out", lbp, "--overwrite"], 2)
    check(p.returncode == 0 and open(lbp).read() != "old\n" and os.path.exists(os.path.join(t, "lbp.csv")),
          "eval loss-by-position --overwrite replaces the .jsonl and writes the .csv", p.both)
    cases = os.path.join(t, "cases")
    subprocess.run([sys.executable, os.path.join(source_dir, "launch", "make_needles.py"), "--out", cases,
                    "--copy-task", "--vocab-size", "32", "--max-length", "64", "--lengths", "64", "--depths", "0.5"],
                   check=True, stdout=subprocess.DEVNULL)
    needle = os.path.join(t, "needle.jsonl")
    with open(needle, "w") as f:
        f.write("old\n")
    p = env.eval(["--task", "needle", "--cases", cases, "--out", needle])
    refused(p, ["--out", "--overwrite"], "eval needle --out onto an existing file")
    check(open(needle).read() == "old\n", "eval needle: the existing file is untouched")
    # import-hf / export-hf take the same flag: an existing --out directory is refused naming it, replaced with it
    # (once the new one is complete), and never the input itself.
    sw_run = os.path.join(t, "swiglu_run")  # export-hf writes LlamaForCausalLM: a SwiGLU model
    p = env.run(["train", env.config, *env.cpu, "--set", "parallel.cp=1", "--set", "model.mlp=swiglu", "--set",
                 "train.steps=1", "--set", "optim.warmup_steps=1", "--set", "train.eval_every=0", "--set",
                 f"train.run_dir={sw_run}"])
    check(p.returncode == 0, "a 1-step SwiGLU checkpoint to export", p.both)
    sw_ckpt = os.path.join(sw_run, "checkpoints", "main", "step_1")
    hf = os.path.join(t, "hf_out")
    os.makedirs(hf)
    with open(os.path.join(hf, "marker"), "w") as f:
        f.write("old")
    refused(env.run(["export-hf", sw_ckpt, "--out", hf, "--dtype", "fp32"]), ["--out", "--overwrite"],
            "export-hf --out onto an existing directory")
    p = env.run(["export-hf", sw_ckpt, "--out", hf, "--dtype", "fp32", "--overwrite"])
    check(p.returncode == 0 and entries(hf) != ["marker"] and "config.json" in entries(hf) and
          not any(e.startswith(".") for e in entries(t)), f"export-hf --overwrite replaces it ({entries(hf)})", p.both)
    imported = os.path.join(t, "imported")
    os.makedirs(imported)
    refused(env.run(["import-hf", hf, "--out", imported, "--device", "cpu"]), ["--overwrite"],
            "import-hf --out onto an existing directory")
    p = env.run(["import-hf", hf, "--out", imported, "--device", "cpu", "--overwrite"])
    check(p.returncode == 0 and "model.safetensors" in entries(imported), "import-hf --overwrite replaces it", p.both)
    refused(env.run(["export-hf", sw_ckpt, "--out", sw_ckpt, "--overwrite"]), ["--out", "the input itself"],
            "export-hf --out onto the checkpoint it reads")
    check(sha(model) == before, "the checkpoint's model.safetensors is still untouched")
    # Row 4: an --out that cannot be written is refused before the eval runs, and leaves nothing.
    dir_out = os.path.join(t, "X.jsonl")
    os.makedirs(dir_out)
    p = env.eval(["--task", "loss-by-position", "--out", dir_out])
    refused(p, ["--out", "is a directory"], "eval loss-by-position --out X.jsonl that is a directory")
    check(not os.path.exists(os.path.join(t, "X.csv")) and "mean loss" not in p.both,
          "eval loss-by-position: refused before the eval, no X.csv left", p.both)
    # A full disk: none of the outputs and no temporaries, exit 2 (a usage / environment error, as every command).
    full = os.path.join(t, "full")
    os.makedirs(full)
    p = env.eval(["--task", "loss-by-position", "--out", os.path.join(full, "f.jsonl")], file_limit=100)
    check(p.returncode == 2 and entries(full) == [], f"eval loss-by-position on a full disk: exit 2 (got "
                                                     f"{p.returncode}), nothing left ({entries(full)})", p.both)
    p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", "2", "--out", os.path.join(full, "g.json"),
                      "--dump-logits", os.path.join(full, "g.npy")], file_limit=100)
    check(p.returncode == 2 and entries(full) == [], f"generate --out --dump-logits on a full disk: exit 2 (got "
                                                     f"{p.returncode}), nothing left ({entries(full)})", p.both)
    p = env.run(["export-hf", sw_ckpt, "--out", os.path.join(full, "hf"), "--dtype", "fp32"], file_limit=100)
    check(p.returncode == 2 and "partial output was removed" in p.both and entries(full) == [],
          f"export-hf on a full disk: exit 2 like generate and eval (got "
                                                     f"{p.returncode}), nothing left ({entries(full)})", p.both)


# ---- rows 8-11 ----
def case_contracts(env):
    t = env.tmp
    p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", "3", "--set", "parallel.cp_a2a=auto"], 2)
    lines = p.stdout.splitlines()
    ok = p.returncode == 0 and len(lines) == 1
    try:
        ok = ok and "new_ids" in json.loads(lines[0])
    except ValueError:
        ok = False
    check(ok, f"generate with parallel.cp_a2a: auto on 2 ranks: stdout is one JSON line ({len(lines)} lines)", p.both)
    refused(env.generate(["--prompt", "1,2,3", "--eos-id", "99"]), ["--eos-id 99", "[0, 31]"],
            "generate --eos-id 99 on a vocabulary of 32")
    p = env.generate(["--prompt", "1,2,3", "--max-new-tokens", "2", "--eos-id", "31"])
    check(p.returncode == 0, "generate --eos-id 31 (in the vocabulary) runs", p.both)
    for ranks in (1, 2):
        refused(env.eval(["--task", "loss-by-position", "--by", "document", "--out", os.path.join(t, "d.jsonl")],
                         ranks), ["--by document", "data.documents"], f"eval --by document without documents "
                                                                        f"({ranks} rank(s))")
    hf = os.path.join(t, "hf_model")
    os.makedirs(hf)
    shutil.copy(os.path.join(env.ckpt, "model.safetensors"), hf)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, f)
    for cmd in ("generate", "eval"):
        argv = [cmd, env.config, *env.cpu, "--checkpoint", hf] + (["--prompt", "1,2"] if cmd == "generate" else [])
        refused(env.run(argv), ["import-hf", "Hugging Face"], f"{cmd} --checkpoint of an HF model directory")
    refused(env.generate(["--prompt", "1,2,3", "--out", t]), ["--out", "is a directory"], "generate --out DIR")
    refused(env.generate(["--prompt-ids", t]), ["--prompt-ids", "is a directory"], "generate --prompt-ids DIR")
    p = env.run(["plan", env.config, "--doc-lengths", t])
    check(p.returncode == 2 and "--doc-lengths" in p.both and "is a directory" in p.both,
          "plan --doc-lengths DIR: exit 2 saying it is a directory", p.both)
    refused(env.generate(["--prompt", "1,2", "--top-k", "abc"], 2), ["--top-k"],
            "a command-line error on 2 ranks (printed once)")
    p = env.eval(["--dump-logits", os.path.join(t, "l.npy")], 2)
    refused(p, ["--dump-logits", "one rank"], "eval --dump-logits on 2 ranks")
    for ranks in (1, 2):
        run = os.path.join(t, f"sub_run_{ranks}")
        p = env.run(["train", env.config, *env.cpu, "--set", "train.steps=2", "--set", "optim.warmup_steps=1",
                     "--set", f"train.run_dir={run}", "--set", "log.metrics_file=sub/m.jsonl"], ranks)
        refused(p, ["log.metrics_file", "sub"], f"log.metrics_file in a missing subdirectory ({ranks} rank(s))")
        check(not os.path.exists(os.path.join(run, "checkpoints")), "... caught at validation: nothing trained")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringtrain", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("case", choices=["limits", "outputs", "contracts"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"rt_hostile_{args.case}_") as tmp:
        env = Env(args, tmp)
        if args.case == "limits":
            case_limits(env)
        elif args.case == "outputs":
            case_outputs(env, args.source_dir)
        else:
            case_contracts(env)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
