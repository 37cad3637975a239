#!/usr/bin/env python3
"""launch/prepare_data.py: llm.c shards (uint16 for a small vocabulary, uint32 above 65,536 tokens), one
delimiter at every document start (BOS when the tokenizer has one, else EOS), a held-out shard, meta.json,
several workers, and a resumed run that writes the same bytes as an uninterrupted one; ringtrain accepts the
shards. Skips (exit 77) when the `tokenizers` package is absent (launch/install-deps.sh --prepare-data).

  test_prepare_data.py --ringtrain build/ringtrain
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from tokenizers import Tokenizer, models, pre_tokenizers
except ImportError as e:
    print(f"SKIP: {e} (launch/install-deps.sh --prepare-data installs tokenizers)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "launch", "prepare_data.py")
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def make_tokenizer(path, n_words, specials):
    vocab = {s: i for i, s in enumerate(specials)}
    for w in range(n_words):
        vocab[f"w{w}"] = len(vocab)
    vocab["[UNK]"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(path)
    return vocab


def read_shard(path):
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    dtype = "<u2" if header[0] == 20240520 else "<u4"
    return header[:3].tolist(), np.frombuffer(raw[1024:], dtype=dtype)


def run_prepare(tmp, out, tokenizer, inputs, extra=(), env=None):
    cmd = [sys.executable, SCRIPT, "--tokenizer", tokenizer, "--out", out, "--val-tokens", "50",
           "--shard-tokens", "120", "--workers", "2", *extra, *inputs]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, **(env or {})))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringtrain", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rt_prep_")
    try:
        rng = np.random.default_rng(0)
        docs = [" ".join(f"w{rng.integers(0, 90)}" for _ in range(rng.integers(3, 30))) for _ in range(40)]
        txt = []
        for i in range(4):
            p = os.path.join(tmp, f"doc{i}.txt")
            open(p, "w").write(docs[i])
            txt.append(p)
        jl = os.path.join(tmp, "more.jsonl")
        with open(jl, "w") as f:
            for d in docs[4:]:
                f.write(json.dumps({"text": d, "id": 1}) + "\n")
        inputs = txt + [jl]
        # A tokenizer with a BOS (<s>) and an EOS: the delimiter is BOS.
        small = os.path.join(tmp, "small.json")
        vocab = make_tokenizer(small, 90, ["<s>", "</s>"])
        out = os.path.join(tmp, "out_small")
        p = run_prepare(tmp, out, small, inputs)
        check(p.returncode == 0, "prepare_data runs: " + p.stdout.strip()[-300:])
        meta = json.load(open(os.path.join(out, "meta.json")))
        check(meta["delimiter_token"] == "<s>" and meta["delimiter_id"] == 0 and meta["delimiter_kind"] == "bos",
              f"delimiter is BOS: {meta['delimiter_token']} {meta['delimiter_id']}")
        check(meta["token_dtype"] == "uint16" and meta["documents"] == 40, "meta.json: uint16, 40 documents")
        stream = []
        for s in meta["val_shards"] + meta["train_shards"]:
            header, toks = read_shard(os.path.join(out, s["file"]))
            check(header == [20240520, 1, len(toks)] and len(toks) == s["tokens"], f"{s['file']}: header {header}")
            stream += toks.tolist()
        expect = []
        for d in docs:
            expect += [0] + [vocab[w] for w in d.split()]
        check(stream == expect, "every document starts with exactly one BOS and the tokens are the documents' in order")
        check(len(meta["val_shards"]) == 1 and len(meta["train_shards"]) >= 2, "one held-out shard, several training")
        # ringtrain accepts the shards (config validation reads every header).
        cfg = os.path.join(tmp, "plan.yaml")
        open(cfg, "w").write(f"device: cpu\nmodel: {{vocab_size: {meta['vocab_size']}, d_model: 64, n_head: 1, "
                             f"n_kv_head: 1}}\ndata: {{source: shards, path: '{out}/train_*.bin', "
                             f"eval_path: '{out}/val_*.bin', seq_len: 16}}\ntrain: {{batch_size: 1, run_dir: {tmp}/r}}\n")
        p2 = subprocess.run([args.ringtrain, "plan", cfg], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(p2.returncode == 0, "ringtrain plan accepts the shards: " + p2.stdout.strip()[-200:])
        # Interrupted after two shards, then resumed: the same bytes as the uninterrupted run.
        out2 = os.path.join(tmp, "out_resumed")
        p = run_prepare(tmp, out2, small, inputs, env={"PREPARE_DATA_TEST_STOP_AFTER_SHARDS": "2"})
        check(p.returncode == 3 and not os.path.exists(os.path.join(out2, "meta.json")), "interrupted run stops early")
        p = run_prepare(tmp, out2, small, inputs)
        check(p.returncode == 0 and "resuming after document" in p.stdout, "the second run resumes")
        same = all(open(os.path.join(out, s["file"]), "rb").read() == open(os.path.join(out2, s["file"]), "rb").read()
                   for s in meta["val_shards"] + meta["train_shards"])
        check(same and json.load(open(os.path.join(out2, "meta.json")))["tokens"] == meta["tokens"],
              "resumed shards are byte-identical to the uninterrupted run's")
        p = run_prepare(tmp, out2, small, inputs, extra=["--val-tokens", "60"])
        check(p.returncode == 2 and "already holds a complete preparation" in p.stdout,
              "a complete --out is refused, not overwritten")
        # EOS only, and a vocabulary above 65,536: uint32 shards with the Llama 3 header.
        big = os.path.join(tmp, "big.json")
        make_tokenizer(big, 70000, ["<|endoftext|>"])
        out3 = os.path.join(tmp, "out_big")
        p = run_prepare(tmp, out3, big, [jl])
        meta3 = json.load(open(os.path.join(out3, "meta.json")))
        check(meta3["delimiter_kind"] == "eos" and meta3["delimiter_token"] == "<|endoftext|>", "no BOS: the delimiter is EOS")
        header, toks = read_shard(os.path.join(out3, meta3["train_shards"][0]["file"]))
        check(meta3["token_dtype"] == "uint32" and header[:2] == [20240801, 7], f"vocab 70,002: uint32 shards {header}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
