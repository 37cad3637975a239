#!/usr/bin/env python3
"""launch/make_needles.py and launch/generate.py on a hostile user's options (issue 43, rows 6 and 7): every user
error ends with one line `<script>: error: ...` naming the option, exit 2, never a traceback; generate.py --np N
passes mpirun --oversubscribe as launch/train.sh does; make_needles.py and prepare_data.py take --overwrite for an
existing --out, as every ringtrain command does (row 3). prepare_data.py needs NumPy. No build and no `tokenizers` package needed: a stand-in
module (word-level, reads tokenizer.json as JSON) comes first on PYTHONPATH, and a stand-in mpirun and ringtrain
record what they were given.

  test_launch_errors.py [--launch-dir DIR]   (default: launch/ of this tree)
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []

STUB_TOKENIZERS = '''"""A stand-in for the `tokenizers` package: a word-level tokenizer, tokenizer.json's "model": {"vocab":
{word: id}} (ids of unknown words: 0)."""
import json


class Encoding:
    def __init__(self, ids):
        self.ids = ids


class Tokenizer:
    def __init__(self, vocab):
        self.vocab = vocab
        self.words = {i: w for w, i in vocab.items()}

    @staticmethod
    def from_file(path):
        with open(path) as f:
            try:
                data = json.load(f)
            except ValueError as e:
                raise Exception(f"expected value at line 1 column 1 ({e})")  # the real one raises a plain Exception
        return Tokenizer(data["model"]["vocab"])

    def token_to_id(self, token):
        return self.vocab.get(token)

    def get_vocab_size(self, with_added_tokens=True):
        return len(self.vocab)

    def encode(self, text, add_special_tokens=True):
        return Encoding([self.vocab.get(w, 0) for w in text.split()])

    def decode(self, ids):
        return " ".join(self.words.get(i, "?") for i in ids)
'''

# mpirun -np N [--oversubscribe] CMD...: like Open MPI on a 2-core machine, refuses more than 2 ranks without
# --oversubscribe; records its arguments, then runs CMD once.
FAKE_MPIRUN = r'''#!/usr/bin/env python3
import os, subprocess, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(" ".join(argv) + "\n")
n = int(argv[argv.index("-np") + 1])
if n > 2 and "--oversubscribe" not in argv:
    print("There are not enough slots available in the system to satisfy the 4 slots", file=sys.stderr)
    sys.exit(1)
i = argv.index("-np") + 2
while argv[i].startswith("--"):
    i += 1
sys.exit(subprocess.call(argv[i:]))
'''

# ringtrain generate CONFIG ... --out FILE: writes a result with two new ids.
FAKE_RINGTRAIN = r'''#!/usr/bin/env python3
import json, sys
out = sys.argv[sys.argv.index("--out") + 1]
with open(out, "w") as f:
    json.dump({"new_ids": [1, 2], "stop": "max_new_tokens"}, f)
'''


def check(cond, what, output=""):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)
        if output:
            print("      " + output.strip().replace("\n", "\n      ")[-2000:], flush=True)


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def run(script, argv, env, cwd):
    try:
        p = subprocess.run([sys.executable, script] + argv, capture_output=True, text=True, timeout=60, env=env,
                           cwd=cwd)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return 124, "(no answer within 60 s)"


def refused(code, out, name, option, what):
    lines = [line for line in out.splitlines() if line.strip()]
    ok = code == 2 and "Traceback" not in out and lines and lines[-1].startswith(f"{name}: error: ") and \
        option in lines[-1]
    check(ok, f"{what}: exit 2 (got {code}), one '{name}: error: ...' line naming {option}, no traceback", out)


def make_needles_cases(script, env, tmp):
    base = ["--copy-task", "--vocab-size", "32", "--max-length", "64", "--lengths", "64"]
    cases = [
        (["--depths", "nan"], "--depths"),
        (["--depths", "0.5,inf"], "--depths"),
        (["--answer-tokens", "0"], "--answer-tokens"),
        (["--answer-tokens", "-3"], "--answer-tokens"),
        (["--samples", "0"], "--samples"),
        (["--vocab-size", "99999999999"], "--vocab-size"),
    ]
    for i, (extra, option) in enumerate(cases):
        out = os.path.join(tmp, f"n{i}")
        code, text = run(script, ["--out", out, *base, *extra], env, tmp)
        refused(code, text, "make_needles.py", option, f"make_needles.py {' '.join(extra)}")
        check(not os.path.exists(out) and not os.path.exists(out + ".partial"), f"... nothing left at {out}")
    no_lengths = ["--copy-task", "--vocab-size", "32", "--max-length", "64"]
    for n in ("0", "-2", "100"):
        code, text = run(script, ["--out", os.path.join(tmp, "nl"), *no_lengths, "--num-lengths", n], env, tmp)
        refused(code, text, "make_needles.py", "--num-lengths", f"make_needles.py --num-lengths {n}")
    bad = os.path.join(tmp, "not_json.json")
    write(bad, "this is not JSON\n")
    code, text = run(script, ["--out", os.path.join(tmp, "nt"), "--tokenizer", bad, "--max-length", "64"], env, tmp)
    refused(code, text, "make_needles.py", "--tokenizer", "make_needles.py --tokenizer of a non-JSON file")
    # An existing --out: refused naming --overwrite; with it, replaced once the new cases are complete.
    out = os.path.join(tmp, "cases")
    code, text = run(script, ["--out", out, *base, "--depths", "0.5"], env, tmp)
    check(code == 0, "make_needles.py writes a case directory", text)
    code, text = run(script, ["--out", out, *base, "--depths", "0.25,0.75"], env, tmp)
    refused(code, text, "make_needles.py", "--overwrite", "make_needles.py onto an existing --out")
    code, text = run(script, ["--out", out, *base, "--depths", "0.25,0.75", "--overwrite"], env, tmp)
    meta = json.load(open(os.path.join(out, "meta.json"))) if code == 0 else {}
    check(code == 0 and meta.get("depths") == [0.25, 0.75] and not os.path.exists(out + ".replaced"),
          "make_needles.py --overwrite replaces the cases", text)


def generate_cases(script, env, tmp):
    config = os.path.join(tmp, "c.yaml")
    write(config, "device: cpu\n")
    tok = os.path.join(tmp, "tokenizer.json")
    write(tok, json.dumps({"model": {"vocab": {"a": 0, "b": 1, "c": 2, "d": 3}}}))
    ckpt = os.path.join(tmp, "ckpt")
    os.makedirs(ckpt)
    header = json.dumps({"__metadata__": {"hf_source": ""}}).encode()
    with open(os.path.join(ckpt, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
    fake_bin = os.path.join(tmp, "ringtrain")
    write(fake_bin, FAKE_RINGTRAIN, 0o755)
    mpirun = os.path.join(tmp, "mpirun")
    write(mpirun, FAKE_MPIRUN, 0o755)
    common = [config, "--checkpoint", ckpt, "--text", "a b c", "--ringtrain", fake_bin, "--mpirun", mpirun]
    bad = os.path.join(tmp, "bad_tokenizer.json")
    write(bad, "not JSON at all\n")
    code, text = run(script, common + ["--tokenizer", bad], env, tmp)
    refused(code, text, "generate.py", "--tokenizer", "generate.py --tokenizer of a non-JSON file")
    huge = os.path.join(tmp, "huge")
    os.makedirs(huge)
    with open(os.path.join(huge, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 2**62) + b"{}")
    code, text = run(script, [config, "--checkpoint", huge, "--text", "a", "--ringtrain", fake_bin], env, tmp)
    refused(code, text, "generate.py", "header length", "generate.py on a checkpoint whose header length is 2^62")
    for np_ in ("0", "-1"):
        code, text = run(script, common + ["--tokenizer", tok, "--np", np_], env, tmp)
        refused(code, text, "generate.py", "--np", f"generate.py --np {np_}")
    code, text = run(script, common + ["--tokenizer", tok, "--np", "4"], env, tmp)
    log = open(env["FAKE_LOG"]).read() if os.path.exists(env["FAKE_LOG"]) else ""
    check(code == 0 and "--oversubscribe" in log and text.strip().endswith("b c"),
          "generate.py --np 4 on a 2-core machine: mpirun gets --oversubscribe (as from train.sh) and it runs",
          text + log)


def prepare_data_cases(script, env, tmp):
    """The same rule for prepare_data.py's --out: a directory that holds files is refused naming --overwrite, and
    replaced with it once the new preparation is complete."""
    tok = os.path.join(tmp, "pd_tokenizer.json")
    write(tok, json.dumps({"model": {"vocab": {"[UNK]": 0, "a": 1, "b": 2, "<|endoftext|>": 3}}}))
    corpus = os.path.join(tmp, "corpus.jsonl")
    write(corpus, "".join(json.dumps({"text": "a b a b a b a b"}) + "\n" for _ in range(200)))
    out = os.path.join(tmp, "prepared")
    os.makedirs(out)
    write(os.path.join(out, "marker"), "old")
    argv = [corpus, "--tokenizer", tok, "--out", out, "--val-tokens", "100", "--shard-tokens", "1000", "--workers",
            "1"]
    code, text = run(script, argv, env, tmp)
    refused(code, text, "prepare_data", "--overwrite", "prepare_data.py onto a directory that holds files")
    check(os.listdir(out) == ["marker"], "prepare_data.py: the existing --out is untouched")
    code, text = run(script, argv + ["--overwrite"], env, tmp)
    check(code == 0 and "meta.json" in os.listdir(out) and "marker" not in os.listdir(out) and
          not os.path.exists(out + ".replaced"), "prepare_data.py --overwrite replaces it", text)


def plot_cases(launch_dir, env, tmp):
    """The plot scripts' --out: refused up front (exit 2, one line) when empty, a directory, not a regular file (a
    pipe: never renamed over, as /dev/null once was) or in a missing directory; no matplotlib needed for these."""
    rows = {"plot_loss_by_position.py": os.path.join(tmp, "lbp_rows.jsonl"),
            "plot_needles.py": os.path.join(tmp, "needle_rows.jsonl")}
    write(rows["plot_loss_by_position.py"], json.dumps({"lo": 0, "hi": 1, "mean_loss": 1.0}) + "\n")
    write(rows["plot_needles.py"], json.dumps({"id": 0, "kind": "copy", "length": 64, "depth": 0.5, "answer_tokens": 5,
                                               "argmax_hits": 5, "accuracy": 1.0, "exact": True,
                                               "mean_logprob": -0.1}) + "\n")
    pipe = os.path.join(tmp, "pipe.png")
    os.mkfifo(pipe)
    for script, rows_file in rows.items():
        for out, says in (("", "is empty"), (tmp, "is a directory"), (pipe, "not a regular file"),
                          (os.path.join(tmp, "no_dir", "p.png"), "does not exist")):
            code, text = run(os.path.join(launch_dir, script), [rows_file, "--out", out], env, tmp)
            refused(code, text, script, "--out", f"{script} --out '{out}'")
            check(says in text, f"... says '{says}'", text)
        check(os.path.exists(pipe) and not os.path.isfile(pipe), f"{script}: the pipe is still a pipe")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch-dir", default=os.path.join(HERE, "..", "..", "launch"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rt_launch_errors_") as tmp:
        stubs = os.path.join(tmp, "stubs", "tokenizers")
        os.makedirs(stubs)
        write(os.path.join(stubs, "__init__.py"), STUB_TOKENIZERS)
        env = dict(os.environ, PYTHONPATH=os.path.join(tmp, "stubs"), FAKE_LOG=os.path.join(tmp, "mpirun.log"))
        make_needles_cases(os.path.join(args.launch_dir, "make_needles.py"), env, tmp)
        generate_cases(os.path.join(args.launch_dir, "generate.py"), env, tmp)
        prepare_data_cases(os.path.join(args.launch_dir, "prepare_data.py"), env, tmp)
        plot_cases(args.launch_dir, env, tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
