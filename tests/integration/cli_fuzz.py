#!/usr/bin/env python3
"""A seeded, time-bounded fuzz of the command-line options (issue 43; tests/integration/config_fuzz.cpp does the
config's keys): a valid command of `ringtrain generate`, `eval`, `plan`, launch/make_needles.py,
launch/generate.py, launch/prepare_data.py or the plot scripts, with one option set to a hostile value (huge, negative, NaN, not a number, empty, a
directory, a missing or existing file, a non-JSON file). Every case must end within its time limit with exit 0,
or exit 2 naming the option it touched, with no traceback, no signal and no source location.

  cli_fuzz.py --ringtrain BIN --source-dir ROOT [--seed S] [--cases N] [--case-limit-s T]
  (RT_FUZZ_SEED, RT_FUZZ_CLI_CASES and RT_FUZZ_CASE_LIMIT_S override the defaults: 43, 200, 20)
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import tempfile

SOURCE_LOCATION = re.compile(r"\.(cpp|h|cu):[0-9]+\]")

NUMBERS = ["0", "-1", "1", "2", "-9223372036854775808", "9223372036854775807", "9223372036854775808",
           "4611686018427387904", "1073741824", "2147483648", "1e30", "-1e30", "nan", "inf", "-inf", "1.5", "abc",
           "", "0x10", "1e-300", "--", "3,4"]
STUB_TOKENIZERS = '''import json
class Encoding:
    def __init__(self, ids):
        self.ids = ids
class Tokenizer:
    def __init__(self, vocab):
        self.vocab = vocab
    @staticmethod
    def from_file(path):
        with open(path) as f:
            try:
                return Tokenizer(json.load(f)["model"]["vocab"])
            except (ValueError, KeyError, TypeError) as e:
                raise Exception(f"cannot parse {path}: {e}")
    def token_to_id(self, token):
        return self.vocab.get(token)
    def get_vocab_size(self, with_added_tokens=True):
        return len(self.vocab)
    def encode(self, text, add_special_tokens=True):
        return Encoding([self.vocab.get(w, 0) for w in text.split()])
    def decode(self, ids):
        return " ".join(str(i) for i in ids)
'''


def paths(work):
    """Hostile paths, all inside the case's own directory (a command that wrongly renames over one destroys
    nothing else; /dev/null was once replaced so): the directory, a missing file, a file in a missing directory,
    an existing file, a non-JSON file, an empty file."""
    return [work, os.path.join(work, "missing"), os.path.join(work, "no_dir", "f"), os.path.join(work, "existing.txt"),
            os.path.join(work, "not_json.json"), os.path.join(work, "empty")]


def output_paths(work):
    """For options that write: the paths above and a named pipe (not a regular file: refused, never opened)."""
    return paths(work) + [os.path.join(work, "pipe")]


class Commands:
    def __init__(self, args, tmp):
        self.tmp, self.bin, self.root = tmp, args.ringtrain, args.source_dir
        self.config = os.path.join(args.source_dir, "configs", "tiny.yaml")
        run = os.path.join(tmp, "run")
        r = subprocess.run([self.bin, "train", self.config, "--set", "device=cpu", "--set", "parallel.cp=1",
                            "--set", "train.steps=2", "--set", "optim.warmup_steps=1", "--set", "train.eval_every=0",
                            "--set", f"train.run_dir={run}"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("training the 2-step checkpoint failed:\n" + r.stdout + r.stderr)
        self.ckpt = os.path.join(run, "checkpoints", "main", "step_2")
        with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
            json.dump({"model": {"vocab": {"[UNK]": 0, "a": 1, "b": 2, "<|endoftext|>": 3}}}, f)
        with open(os.path.join(tmp, "corpus.jsonl"), "w") as f:
            f.write("".join(json.dumps({"text": "a b a b a b a b"}) + "\n" for _ in range(200)))
        with open(os.path.join(tmp, "lbp.jsonl"), "w") as f:
            for lo, hi in ((0, 1), (1, 2), (2, 4), (4, 64)):
                f.write(json.dumps({"checkpoint": "c", "by": "window", "lo": lo, "hi": hi, "targets": 10,
                                    "mean_loss": 1.0}) + "\n")
        with open(os.path.join(tmp, "needles.jsonl"), "w") as f:
            for k, (length, depth) in enumerate(((64, 0.0), (64, 0.5), (32, 0.0), (32, 0.5))):
                f.write(json.dumps({"id": k, "kind": "copy", "length": length, "depth": depth, "answer_tokens": 5,
                                    "argmax_hits": 3, "accuracy": 0.6, "exact": False, "mean_logprob": -1.0,
                                    "checkpoint": "c"}) + "\n")
        stubs = os.path.join(tmp, "stubs", "tokenizers")
        os.makedirs(stubs)
        with open(os.path.join(stubs, "__init__.py"), "w") as f:
            f.write(STUB_TOKENIZERS)
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        PYTHONPATH=os.path.join(tmp, "stubs"))

    def case(self, rng, i):
        """(what, option, argv) of case i: one option of one command set to a hostile value."""
        work = os.path.join(self.tmp, f"case_{i}")  # each case's own files: an output of one is no input of another
        os.makedirs(work)
        for name, text in (("existing.txt", "keep\n"), ("not_json.json", "not JSON {\n"), ("empty", "")):
            with open(os.path.join(work, name), "w") as f:
                f.write(text)
        os.mkfifo(os.path.join(work, "pipe"))
        outputs = output_paths(work)
        rt = [self.bin]
        cpu = ["--set", "device=cpu", "--set", "train.eval_batches=1"]
        hostile_paths = paths(work)
        kind = rng.choice(["generate", "generate", "eval", "plan", "plan", "make_needles", "generate.py",
                           "prepare_data", "plot"])
        if kind == "generate":
            base = {"--checkpoint": self.ckpt, "--prompt": "1,2,3", "--max-new-tokens": "2"}
            options = {o: NUMBERS for o in ("--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                                            "--eos-id", "--prefill-chunk", "--device-memory-gib", "--prompt")}
            options.update({o: hostile_paths for o in ("--prompt-ids", "--checkpoint")})
            options.update({o: outputs for o in ("--out", "--dump-logits")})
            head = rt + ["generate", self.config] + cpu
        elif kind == "eval":
            base = {"--checkpoint": self.ckpt}
            options = {"--task": ["loss", "loss-by-position", "needle", "bogus", ""], "--by": ["window", "document",
                                                                                            "x", ""]}
            options.update({o: hostile_paths for o in ("--cases", "--checkpoint")})
            options.update({o: outputs for o in ("--out", "--dump-logits")})
            head = rt + ["eval", self.config] + cpu
        elif kind == "plan":
            base = {"--generate-context": "100"}
            options = {o: NUMBERS for o in ("--generate-context", "--max-new-tokens", "--prefill-chunk",
                                            "--device-memory-gib", "--host-memory-gib", "--ranks-per-node")}
            options["--doc-lengths"] = hostile_paths
            head = rt + ["plan", self.config, "--set", "device=cpu"]
        elif kind == "make_needles":
            base = {"--out": os.path.join(work, "cases"), "--vocab-size": "32", "--max-length": "64",
                    "--lengths": "64", "--depths": "0.5"}
            options = {o: NUMBERS for o in ("--vocab-size", "--max-length", "--lengths", "--num-lengths", "--depths",
                                            "--samples", "--answer-tokens", "--seed")}
            options["--out"] = outputs
            head = [sys.executable, os.path.join(self.root, "launch", "make_needles.py"), "--copy-task"]
        elif kind == "prepare_data":
            base = {"--tokenizer": os.path.join(self.tmp, "tokenizer.json"), "--out": os.path.join(work, "prepared"),
                    "--val-tokens": "100", "--shard-tokens": "1000", "--workers": "1"}
            options = {o: NUMBERS for o in ("--val-tokens", "--shard-tokens", "--workers")}
            options.update({"--delimiter-token": ["", "a", "zz", "<|endoftext|>", "nan"], "--errors": ["replace", "x"],
                            "--out": outputs, "--tokenizer": hostile_paths})
            head = [sys.executable, os.path.join(self.root, "launch", "prepare_data.py"),
                    os.path.join(self.tmp, "corpus.jsonl")]
        elif kind == "plot":
            needles = rng.random() < 0.5
            script = "plot_needles.py" if needles else "plot_loss_by_position.py"
            base = {"--out": os.path.join(work, "p.png")}
            options = {"--out": outputs + [os.path.join(work, "p.txt"), os.path.join(work, "p")],
                       "--labels": ["a", "a,b", "", "--"]}
            if needles:
                options["--metric"] = ["accuracy", "exact", "bogus"]
            head = [sys.executable, os.path.join(self.root, "launch", script),
                    os.path.join(self.tmp, "needles.jsonl" if needles else "lbp.jsonl")]
        else:
            base = {"--checkpoint": self.ckpt, "--text": "a b", "--tokenizer": os.path.join(self.tmp, "tokenizer.json"),
                    "--max-new-tokens": "2", "--ringtrain": self.bin}
            options = {o: NUMBERS for o in ("--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed",
                                            "--eos-id", "--prefill-chunk", "--np")}
            options.update({o: hostile_paths for o in ("--tokenizer", "--checkpoint")})
            head = [sys.executable, os.path.join(self.root, "launch", "generate.py"), self.config, "--set",
                    "device=cpu"]
        option = rng.choice(sorted(options))
        value = rng.choice(options[option])
        if option == "--np" and value not in ("0", "-1", "1", "2", "abc", ""):
            value = "0"  # more ranks than that would only be slow, not wrong
        if option == "--prompt-ids":  # instead of --prompt, not with it
            base.pop("--prompt")
        if option == "--lengths" and kind == "make_needles":
            base.pop("--lengths")
        argv = list(head)
        for k, v in {**base, option: value}.items():
            argv += [f"{k}={v}"] if v.startswith("-") else [k, v]  # a value that looks like an option stays one
        return f"{kind} {option} {value!r}", option, argv, work

    def run(self, argv, work, limit_s):
        try:
            p = subprocess.run(["timeout", "-s", "KILL", str(limit_s)] + argv, capture_output=True, env=self.env,
                               cwd=work)
            return p.returncode, (p.stdout + p.stderr).decode(errors="replace")
        except OSError as e:
            return -1, str(e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringtrain", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("RT_FUZZ_SEED", "43")))
    ap.add_argument("--cases", type=int, default=int(os.environ.get("RT_FUZZ_CLI_CASES", "200")))
    ap.add_argument("--case-limit-s", type=int, default=int(os.environ.get("RT_FUZZ_CASE_LIMIT_S", "20")))
    args = ap.parse_args()
    failures, refused = [], 0
    with tempfile.TemporaryDirectory(prefix="rt_cli_fuzz_") as tmp:
        commands = Commands(args, tmp)
        rng = random.Random(args.seed)
        cases = [commands.case(rng, i) for i in range(args.cases)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:  # CI has two cores
            results = list(pool.map(lambda c: commands.run(c[2], c[3], args.case_limit_s), cases))
        for i, ((what, option, argv, _), (code, out)) in enumerate(zip(cases, results)):
            where = f"case {i} (seed {args.seed}): {what}"
            problem = ""
            if code == 137:
                problem = f"no answer within {args.case_limit_s} s"
            elif code not in (0, 2):
                problem = f"exit {code} (only 0, or 2 for a refusal)"
            elif "Traceback" in out:
                problem = "a traceback"
            elif code == 2 and option not in out:
                problem = f"the refusal does not name {option}"
            elif code == 2 and SOURCE_LOCATION.search(out):
                problem = "a source location in a user's error"
            refused += code == 2
            if problem:
                failures.append(where)
                print(f"FAIL  {where}: {problem}\n      {' '.join(argv)}\n      " +
                      out.strip().replace("\n", "\n      ")[-1500:], flush=True)
    print(f"{len(cases)} cases, {refused} refused, {len(failures)} failed")
    if refused < len(cases) // 3:
        print(f"only {refused} of {len(cases)} cases were refused: the fuzz does not exercise refusals")
        sys.exit(1)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
