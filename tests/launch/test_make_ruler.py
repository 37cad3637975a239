#!/usr/bin/env python3
"""launch/make_ruler.py: deterministic for a seed (a case depends only on the seed, its task, length and sample);
the answers sit in the haystack where each task says (copy task: at the evidence spans of the first span, the prompt
a copy prefix; bytes: the needle / chain lines hold them, fwe's answers are the 2nd-4th most frequent words);
prompt + max_new_tokens fits each length; every user error exits 2 with `make_ruler.py: error:` and no traceback.
With the `tokenizers` package, the same through a small byte-level BPE tokenizer and its token_text.json."""
import collections
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MAKE = os.path.join(ROOT, "launch", "make_ruler.py")
TASKS = ["niah_single", "niah_multikey", "niah_multivalue", "vt", "fwe"]


def run(*args):
    return subprocess.run([sys.executable, MAKE, *args], capture_output=True, text=True, timeout=300)


def make(out, *args):
    r = run("--out", out, *args)
    assert r.returncode == 0, f"make_ruler.py {' '.join(args)}: exit {r.returncode}: {r.stderr}"
    return read(out)


def read(out):
    cases = [json.loads(line) for line in open(os.path.join(out, "cases.jsonl")) if line.strip()]
    meta = json.load(open(os.path.join(out, "meta.json")))
    text = [bytes.fromhex(h) for h in json.load(open(os.path.join(out, "token_text.json")))["tokens"]]
    for c in cases:
        raw = open(os.path.join(out, c["file"]), "rb").read()
        ids = list(struct.unpack(f"<{len(raw) // 4}i", raw))
        assert len(ids) == c["prompt_tokens"] + c["gold_tokens"], c
        c["prompt"], c["gold"] = ids[:c["prompt_tokens"]], ids[c["prompt_tokens"]:]
        assert c["prompt_tokens"] + c["max_new_tokens"] <= c["length"], c
        assert all(0 <= t < meta["vocab_size"] for t in ids), c
    return cases, meta, text


def files(out):
    return {name: open(os.path.join(out, name), "rb").read() for name in sorted(os.listdir(out))}


def check_copy(cases, vocab):
    sep = vocab - 1
    for c in cases:
        span = (c["length"] - 1) // 2
        p = c["prompt"]
        x = p[:span]
        assert p[span] == sep and sep not in x, c["id"]
        q = len(p) - span - 1
        assert p[span + 1:] == x[:q], f"case {c['id']}: the prompt is not x, the separator and a prefix of x"
        ends = [e for _, e in c["evidence"]]
        assert c["gold"] == x[q:max(ends)] and c["max_new_tokens"] == len(c["gold"]), c["id"]
        assert q == min(b for b, _ in c["evidence"]), c["id"]
        assert len(c["answers"]) == len(c["evidence"]), c["id"]
        for ans, (b, e) in zip(c["answers"], c["evidence"]):
            assert ans == "".join(f"[{t}]" for t in x[b:e]), f"case {c['id']}: answer {ans} not at [{b}, {e})"
        lines = [tuple(x[i:i + 4]) for i in range(0, span - span % 4, 4)]
        if c["task"] == "niah_single":
            assert len(set(lines)) == 2, f"case {c['id']}: a noise haystack is one line repeated and the needle"
        if c["task"] == "niah_multivalue":
            keys = {tuple(x[b - 2:b]) for b, _ in c["evidence"]}
            assert len(keys) == 1 and len(set(c["answers"])) == 4, c["id"]
        if c["task"] == "niah_multikey":
            b = c["evidence"][0][0]
            key = tuple(x[b - 2:b])
            assert sum(line[:2] == key for line in lines) == 1, f"case {c['id']}: the queried key is not unique"
        if c["task"] == "vt":
            for j in range(1, 5):  # each link names the one before it
                b = c["evidence"][j][0]
                pb = c["evidence"][j - 1][0]
                assert x[b + 2:b + 4] == x[pb:pb + 2], f"case {c['id']}: link {j} does not name link {j - 1}"


def text_of(ids, text):
    return b"".join(text[i] for i in ids).decode("utf-8")


def check_text(cases, text, filler_cost):
    for c in cases:
        prompt = text_of(c["prompt"], text)
        pieces = [text_of(c["prompt"][b:e], text) for b, e in c["evidence"]]
        # Filled: less than one filler line (or fwe word) short of the length.
        assert c["length"] - (c["prompt_tokens"] + c["max_new_tokens"]) <= filler_cost, c["id"]
        task = c["task"]
        if task.startswith("niah"):
            m = re.search(r"special magic numbers? for (\S+) mentioned in the provided text\?", prompt)
            assert m, c["id"]
            key = m.group(1)
            assert len(pieces) == len(c["answers"]) == (4 if task == "niah_multivalue" else 1), c["id"]
            for ans, piece in zip(c["answers"], pieces):
                assert piece == f"One of the special magic numbers for {key} is: {ans}.\n", (c["id"], piece)
            haystack = prompt[:prompt.index("What ")]
            owners = re.findall(r"special magic numbers for (\S+) is: (\d+)\.", haystack)
            assert sorted(v for k, v in owners if k == key) == sorted(c["answers"]), c["id"]
            if task == "niah_multikey":
                assert len(owners) > 3, f"case {c['id']}: a needle haystack of distractor needles"
            else:
                assert len(owners) == len(c["answers"]) and "The grass is green." in haystack, c["id"]
            assert text_of(c["gold"], text).strip(" .").replace(" and", ",").split(", ") == c["answers"], c["id"]
        elif task == "vt":
            body = prompt[prompt.rindex("Memorize and track"):]  # the case, after its worked example
            value = re.search(r"assigned the value (\d+) in the text above", body).group(1)
            assign = dict(re.findall(r"VAR (\w+) = (VAR \w+|\d+)\n", body))
            holders = [n for n in assign if assign[n] == value]
            changed = True
            while changed:
                changed = False
                for n, v in assign.items():
                    if v.startswith("VAR ") and v[4:] in holders and n not in holders:
                        holders.append(n)
                        changed = True
            assert holders == c["answers"], (c["id"], holders, c["answers"])
            assert [p.split(" = ")[0][4:] for p in pieces] == c["answers"], c["id"]
            assert prompt.count("Memorize and track") == 2, f"case {c['id']}: one worked example, then the case"
        elif task == "fwe":
            words = prompt[prompt.index("\n") + 1:prompt.index("\nQuestion:")].split()
            counts = collections.Counter(words)
            ranked = [w for w, _ in counts.most_common()]
            assert ranked[0] == "...", c["id"]
            assert ranked[1:4] == c["answers"], (c["id"], counts.most_common(6))
            assert counts[ranked[3]] > counts[ranked[4]], f"case {c['id']}: the third answer is tied"
            assert sorted({p.strip() for p in pieces}) == sorted(c["answers"]), c["id"]


def expect_error(args, needle):
    r = run(*args)
    assert r.returncode == 2, f"{args}: exit {r.returncode}, not 2: {r.stderr}"
    assert r.stderr.startswith("make_ruler.py: error: ") and needle in r.stderr, f"{args}: {r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr


def main():
    with tempfile.TemporaryDirectory() as tmp:
        def d(name):
            return os.path.join(tmp, name)

        # Copy task: deterministic, a different seed differs, a task alone gives the same cases.
        copy_args = ["--copy-task", "--vocab-size", "32", "--max-length", "64", "--lengths", "48,64", "--samples", "3"]
        cases, meta, text = make(d("c1"), *copy_args)
        assert meta["tokenizer"] == "copy" and len(cases) == 30 and len(text) == 32
        make(d("c2"), *copy_args)
        assert files(d("c1")) == files(d("c2")), "the same seed wrote different cases"
        make(d("c3"), *copy_args, "--seed", "1")
        assert files(d("c1"))["cases.jsonl"] != files(d("c3"))["cases.jsonl"], "another seed wrote the same cases"
        alone, _, _ = make(d("c4"), *copy_args, "--tasks", "vt")
        assert [a["prompt"] for a in alone] == [c["prompt"] for c in cases if c["task"] == "vt"]
        check_copy(cases, 32)
        assert {c["task"] for c in cases} == set(TASKS)

        # Bytes: every task at two lengths, answers where the task puts them.
        cases, meta, text = make(d("b1"), "--bytes", "--max-length", "4096", "--lengths", "1536,4096",
                                 "--samples", "2", "--seed", "7")
        assert meta["tokenizer"] == "bytes" and meta["vocab_size"] == 256 and len(cases) == 20
        check_text(cases, text, filler_cost=91)
        make(d("b2"), "--bytes", "--max-length", "4096", "--lengths", "1536,4096", "--samples", "2", "--seed", "7")
        assert files(d("b1")) == files(d("b2"))

        # User errors: exit 2, one line, no traceback; nothing left behind.
        expect_error(["--out", d("c1"), *copy_args], "--overwrite")
        r = run("--out", d("c1"), *copy_args, "--seed", "1", "--overwrite")
        assert r.returncode == 0, r.stderr
        assert files(d("c1")) == files(d("c3")), "--overwrite did not replace the cases"
        open(d("plain"), "w").close()
        expect_error(["--out", d("plain"), *copy_args, "--overwrite"], "not a directory")
        expect_error(["--out", d("e1"), "--copy-task", "--vocab-size", "32", "--max-length", "64", "--lengths",
                      "16"], "too short")
        expect_error(["--out", d("e2"), "--bytes", "--max-length", "64", "--lengths", "128"], "--max-length 64")
        expect_error(["--out", d("e3"), "--bytes", "--max-length", "4096", "--tasks", "qa"], "qa")
        expect_error(["--out", d("e4"), "--copy-task", "--max-length", "64"], "--vocab-size")
        expect_error(["--out", d("e5"), "--tokenizer", d("missing.json"), "--max-length", "4096"], "tokenizer")
        expect_error(["--out", d("e6"), "--bytes", "--max-length", "4096", "--lengths", "4096,x"], "--lengths")
        expect_error(["--out", d("e7"), "--copy-task", "--vocab-size", str(2**40), "--max-length", "64"],
                     "--vocab-size")
        expect_error(["--out", d("e8"), "--bytes", "--max-length", "4096", "--samples", str(10**7)], "cases")
        expect_error(["--out", d("e12"), "--copy-task", "--vocab-size", "4", "--max-length", "64"], "--vocab-size")
        # A small vocabulary at a long length: the 2-token keys and words run out of fresh values, and still end.
        small, _, _ = make(d("c5"), "--copy-task", "--vocab-size", "5", "--max-length", "4096", "--samples", "1")
        check_copy(small, 5)
        expect_error(["--out", d("e9"), "--bytes", "--max-length", str(2**30), "--lengths", str(2**30)], "tokens")
        expect_error(["--out", d("e10"), "--bytes", "--max-length", str(2**40)], "--max-length")
        expect_error(["--out", d("e11"), "--copy-task", "--vocab-size", "32", "--max-length", "64", "--max-new",
                      "1000"], "too short")
        assert not any(os.path.exists(d(n)) or os.path.exists(d(n) + ".partial") for n in
                       ("e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9", "e10", "e11", "e12")), \
            "a refused run left a directory"

        # A byte-level BPE tokenizer.json (when the `tokenizers` package is installed).
        try:
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        except ImportError:
            print("the tokenizers package is missing: the tokenizer.json path was not checked")
        else:
            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            corpus = ["The grass is green. The sky is blue. One of the special magic numbers for x is: 1234567.",
                      "VAR ABCDE = VAR FGHIJ. Memorize and track the chain. What are all the numbers?"] * 50
            tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
            path = d("tokenizer.json")
            tok.save(path)
            cases, meta, text = make(d("t1"), "--tokenizer", path, "--max-length", "2048", "--lengths", "1024,2048")
            assert meta["tokenizer"].startswith("sha256:") and len(text) == meta["vocab_size"]
            for c in cases:  # the token texts joined read back the text the pieces were made from
                assert text_of(c["prompt"] + c["gold"], text) == tok.decode(c["prompt"] + c["gold"]), c["id"]
            noise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n"
            check_text(cases, text, filler_cost=len(tok.encode(noise).ids))
    print("PASS")


if __name__ == "__main__":
    main()
