#!/usr/bin/env python3
"""launch/prepare_data.py on bad inputs and options (issue 31, rows 2, 5 and 12). Each case must end promptly
with one clear line and exit 2, no traceback, and leave neither --out nor <out>.partial behind; the inputs that
are skipped (binary, empty) are named in a warning. Needs no `tokenizers` package: a stand-in module (a
whitespace word-level tokenizer) comes first on PYTHONPATH, so that CI runs every case. The script under test
needs NumPy (except in the case that hides it).

  test_prepare_data_errors.py [--python PYTHON]
"""
import argparse
import array
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "launch", "prepare_data.py")
TIMEOUT_S = 30  # each run; a hang (row 2) ends here
failures = []

STUB_TOKENIZERS = '''"""A stand-in for the `tokenizers` package: a word-level tokenizer split on white space."""
import json


class Encoding:
    def __init__(self, ids):
        self.ids = ids


class Tokenizer:
    def __init__(self, vocab):
        self.vocab = vocab

    @classmethod
    def from_file(cls, path):
        with open(path) as f:
            return cls(json.load(f)["model"]["vocab"])

    def token_to_id(self, token):
        return self.vocab.get(token)

    def get_vocab_size(self, with_added_tokens=True):
        return len(self.vocab)

    def encode(self, text, add_special_tokens=True):
        unk = self.vocab["[UNK]"]
        return Encoding([self.vocab.get(w, unk) for w in text.split()])
'''


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


class Env:
    def __init__(self, tmp, python):
        self.tmp, self.python = tmp, python
        stubs = os.path.join(tmp, "stubs", "tokenizers")
        os.makedirs(stubs)
        with open(os.path.join(stubs, "__init__.py"), "w") as f:
            f.write(STUB_TOKENIZERS)
        self.stubs = os.path.dirname(stubs)
        no_numpy = os.path.join(tmp, "no_numpy", "numpy")
        os.makedirs(no_numpy)
        with open(os.path.join(no_numpy, "__init__.py"), "w") as f:
            f.write("raise ImportError(\"No module named 'numpy' (hidden by the test)\")\n")
        self.no_numpy = os.path.dirname(no_numpy)
        self.vocab = {"<s>": 0, "</s>": 1, **{f"w{i}": 2 + i for i in range(50)}, "[UNK]": 52}
        self.tokenizer = os.path.join(tmp, "tokenizer.json")
        with open(self.tokenizer, "w") as f:
            json.dump({"model": {"type": "WordLevel", "vocab": self.vocab, "unk_token": "[UNK]"}}, f)
        self.n = 0

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, data):
        p = self.path(name)
        with open(p, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        return p

    def docs(self, prefix, n, words=12):
        """n text files of `words` words each."""
        return [self.write(f"{prefix}{i}.txt", " ".join(f"w{(i * 7 + j) % 50}" for j in range(words)))
                for i in range(n)]

    def run(self, inputs, out=None, extra=(), hide_numpy=False):
        """-> (exit code or None on a hang, output, out)."""
        self.n += 1
        out = out if out is not None else self.path(f"out{self.n}")
        cmd = [self.python, SCRIPT, "--tokenizer", self.tokenizer, "--out", out, "--val-tokens", "20",
               "--shard-tokens", "40", "--workers", "2", *extra, *inputs]
        path = [self.no_numpy] if hide_numpy else []
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path + [self.stubs]))
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             start_new_session=True)
        try:
            output, _ = p.communicate(timeout=TIMEOUT_S)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the script and its pool
            output, _ = p.communicate()
            rc = None
        return rc, output, out


def refused(env, what, rc, output, out, needles):
    """An input error: exit 2, an error line holding every needle, no traceback, nothing left behind."""
    lines = [line for line in output.splitlines() if line.startswith("prepare_data: error: ")]
    clear = len(lines) == 1 and all(n in lines[0] for n in needles)
    left = [p for p in (out, os.path.normpath(out) + ".partial") if os.path.exists(p)]
    check(rc == 2 and clear and "Traceback" not in output and not left,
          f"{what}: exit 2 (got {'a hang' if rc is None else rc}), one error line naming {needles}, nothing "
          f"left behind {left}\n      " + output.strip().replace("\n", "\n      ")[-600:])


def shard_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    header = array.array("i", raw[:1024])
    toks = array.array("H", raw[1024:])
    return header[:3].tolist(), toks.tolist()


def row2_bad_jsonl_lines(env):
    good = [json.dumps({"text": f"w{i} w{i + 1} w{i + 2}"}) for i in range(40)]
    for name, bad, needle in (("no_text", json.dumps({"body": "w1 w2"}), "no 'text' field"),
                              ("text_5", json.dumps({"text": 5}), "field 'text' is 5, not a string"),
                              ("not_json", "this is { not json", "not JSON")):
        p = env.write(f"{name}.jsonl", "\n".join(good[:30] + [bad] + good[30:]) + "\n")
        rc, output, out = env.run([p])
        refused(env, f"row 2: a JSONL line with {name}", rc, output, out, [f"{p}:31:", needle])


def row5_tracebacks(env):
    docs = env.docs("r5_", 6)
    p = env.write("latin1.jsonl", json.dumps({"text": "w1 w2"}).encode() + b"\n" +
                  b'{"text": "w3 caf\xe9 w4"}\n')
    rc, output, out = env.run([p])
    refused(env, "row 5: a byte that is not UTF-8 in a JSONL", rc, output, out,
            [f"{p}:2:", "byte 34 of the file (0xe9) is not UTF-8", "--errors replace"])
    rc, output, out = env.run(docs, extra=["--workers", "0"])
    refused(env, "row 5: --workers 0", rc, output, out, ["--workers must be >= 1 (got 0)"])
    a_file = env.write("a_file", "not a directory")
    rc, output, _ = env.run(docs, out=a_file)
    ok = rc == 2 and "is a file, not a directory" in output and "Traceback" not in output
    check(ok and open(a_file).read() == "not a directory",
          f"row 5: --out naming a file: exit 2, said, the file untouched (exit {rc}): {output.strip()[-300:]}")
    rc, output, out = env.run(docs, hide_numpy=True)
    refused(env, "row 5: NumPy missing", rc, output, out, ["NumPy is missing", "apt install python3-numpy"])
    check("docs" not in output and "input file(s)" not in output,
          "row 5: NumPy missing is found before any tokenizing")


def row12_binary_utf8_empty(env):
    docs = env.docs("r12_", 5)
    binary = env.write("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    empty = [env.write("empty0.txt", ""), env.write("empty1.txt", "")]
    blank = env.write("blank.txt", "  \n\t\n")
    rc, output, out = env.run(docs + [binary] + empty + [blank])
    meta = json.load(open(os.path.join(out, "meta.json"))) if rc == 0 else {}
    check(rc == 0 and meta.get("documents") == 5,
          f"row 12: binary and empty inputs are skipped: exit {rc}, {meta.get('documents')} documents (want 5)")
    check("skipping 1 binary file(s)" in output and f"{binary} (byte 8)" in output,
          "row 12: the binary file is named in a warning")
    check("skipping 2 empty file(s)" in output and empty[0] in output and empty[1] in output,
          "row 12: the empty files are counted and named in a warning")
    check("skipped 1 document(s) of white space only" in output, "row 12: a blank document is counted")
    stream = []
    for s in meta.get("val_shards", []) + meta.get("train_shards", []):
        stream += shard_tokens(os.path.join(out, s["file"]))[1]
    expect = []
    for d in docs:
        expect += [0] + [env.vocab[w] for w in open(d).read().split()]
    check(stream == expect, "row 12: the shards hold the 5 text documents only, each after one BOS")
    bad = env.write("cp1252.txt", b"w1 w2 w3 w4 w5 \x93w6\x94 w7")
    rc, output, out = env.run(docs + [bad])
    refused(env, "row 12: a text file that is not UTF-8", rc, output, out,
            [bad, "byte 15 of the file (0x93) is not UTF-8"])
    rc, output, out = env.run(docs + [bad], extra=["--errors", "replace"])
    meta = json.load(open(os.path.join(out, "meta.json"))) if rc == 0 else {}
    check(rc == 0 and meta.get("documents") == 6 and "became U+FFFD in 1 file(s)" in output and bad in output,
          f"row 12: --errors replace substitutes and says so (exit {rc}): {output.strip()[-300:]}")
    rc, output, out = env.run([binary] + empty)
    refused(env, "row 12: nothing left to tokenize", rc, output, out, ["no documents"])


def row12_too_few_documents(env):
    one = env.docs("single_", 1, words=200)
    out = env.path("single_out/")
    rc, output, _ = env.run(one, out=out)
    refused(env, "row 12: a single document", rc, output, out, ["1 document", "at least 2", "add input files"])
    check("lower --val-tokens" not in output, "row 12: a single document: no hint to lower --val-tokens")
    more = one + env.docs("second_", 1, words=30)
    rc, output, _ = env.run(more, out=out)
    check(rc == 0 and os.path.exists(os.path.join(out, "meta.json")) and not os.path.exists(out + ".partial"),
          f"row 12: the retry with 2 documents into the same --out (a trailing slash) works (exit {rc}): "
          f"{output.strip()[-300:]}")
    # Several documents, all in the held-out shard: the hint names a --val-tokens that works.
    docs = env.docs("val_", 3, words=10)  # 3 x 11 tokens
    rc, output, out = env.run(docs, extra=["--val-tokens", "1000"])
    refused(env, "row 12: --val-tokens above the corpus", rc, output, out, ["lower --val-tokens to at most 22"])
    rc, output, out = env.run(docs, extra=["--val-tokens", "22"])
    meta = json.load(open(os.path.join(out, "meta.json"))) if rc == 0 else {}
    check(rc == 0 and len(meta.get("train_shards", [])) == 1,
          f"row 12: the --val-tokens the hint names works (exit {rc}): {output.strip()[-300:]}")


def interrupted_and_resumed(env):
    docs = env.docs("res_", 12)
    out = env.path("resumed")
    os.environ["PREPARE_DATA_TEST_STOP_AFTER_SHARDS"] = "2"
    try:
        rc, output, _ = env.run(docs, out=out)
    finally:
        del os.environ["PREPARE_DATA_TEST_STOP_AFTER_SHARDS"]
    check(rc == 3 and not os.path.exists(out) and os.path.exists(os.path.join(out + ".partial", "progress.json")),
          f"an interrupted run keeps {out}.partial and writes no --out (exit {rc})")
    rc, output, _ = env.run(docs, out=out, extra=["--val-tokens", "30"])
    check(rc == 2 and "progress.json differs" in output and os.path.isdir(out + ".partial"),
          "another preparation into the interrupted one is refused, and the interrupted one is kept")
    rc, output, _ = env.run(docs, out=out)
    check(rc == 0 and "resuming after document" in output and os.path.exists(os.path.join(out, "meta.json"))
          and not os.path.exists(out + ".partial"), f"the same command resumes and completes (exit {rc})")
    rc, output, again = env.run(docs)
    same = rc == 0 and all(open(os.path.join(out, f), "rb").read() == open(os.path.join(again, f), "rb").read()
                           for f in os.listdir(again) if f.endswith(".bin"))
    check(same, "the resumed shards are byte-identical to an uninterrupted run's")
    rc, output, _ = env.run(docs, out=out)
    check(rc == 2 and "already holds a complete preparation" in output, "a complete --out is not overwritten")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable, help="the python3 that runs prepare_data.py (with NumPy)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rt_prep_err_")
    try:
        env = Env(tmp, args.python)
        row2_bad_jsonl_lines(env)
        row5_tracebacks(env)
        row12_binary_utf8_empty(env)
        row12_too_few_documents(env)
        interrupted_and_resumed(env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
