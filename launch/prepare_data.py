#!/usr/bin/env python3
"""Tokenize text into llm.c token shards for `data.source: shards`.

  launch/prepare_data.py --tokenizer path/to/tokenizer.json --out data/mycorpus INPUT... [options]

INPUT: text files (each file is one document) or JSONL files (*.jsonl, one document per line, its `text`
field); globs are expanded. The tokenizer is a local Hugging Face tokenizer.json, read with the `tokenizers`
package (install it with `launch/install-deps.sh --prepare-data`).

Writes into --out:
  val_000000.bin            the held-out shard: the first documents, up to --val-tokens tokens
  train_000000.bin, ...     the training shards, about --shard-tokens tokens each (a shard ends after the
                            document that fills it, so documents never straddle two shards)
  meta.json                 the tokenizer, its vocabulary size, the delimiter token and the shard list
Shards are llm.c's format (dev/data/data_common.py): a 256-int32 header (magic, version, token count), then
the tokens: magic 20240520 version 1 uint16 when the vocabulary fits in 16 bits, else magic 20240801 version 7
uint32 (Llama 3's 128,256 tokens).

Every document starts with exactly one delimiter token, llm.c's convention: BOS if the tokenizer has one,
else EOS (GPT-2: <|endoftext|> 50256; Llama 3: <|begin_of_text|> 128000). The text is encoded without the
tokenizer's own special tokens, so no second BOS appears. --delimiter-token overrides the choice.

Several processes tokenize (--workers, default: all cores); a progress line shows documents, tokens, MB and an
ETA. Each shard is written to a temporary file and renamed, and progress.json records what is complete:
running the same command again resumes after the last complete shard.
"""
import argparse
import glob
import hashlib
import json
import multiprocessing as mp
import os
import sys
import time

HEADER_INTS = 256
FORMATS = {"uint16": (20240520, 1, 2), "uint32": (20240801, 7, 4)}
KNOWN_BOS = ["<|begin_of_text|>", "<s>", "<bos>", "[BOS]", "<|startoftext|>"]
KNOWN_EOS = ["<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[EOS]"]

_tokenizer = None


def fail(msg):
    print(f"prepare_data: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        fail("the `tokenizers` package is missing; run launch/install-deps.sh --prepare-data")
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # the package raises its own exception types
        fail(f"cannot read tokenizer '{path}': {e}")


def token_content(value):
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def choose_delimiter(tok, tokenizer_path, override):
    """-> (token text, id, 'bos' | 'eos' | 'given')."""
    if override:
        i = tok.token_to_id(override)
        if i is None:
            fail(f"--delimiter-token '{override}' is not in the tokenizer's vocabulary")
        return override, i, "given"
    cfg_path = os.path.join(os.path.dirname(os.path.abspath(tokenizer_path)), "tokenizer_config.json")
    cfg = {}
    if os.path.exists(cfg_path):
        with open(cfg_path) as f:
            cfg = json.load(f)
    for kind, key, known in (("bos", "bos_token", KNOWN_BOS), ("eos", "eos_token", KNOWN_EOS)):
        candidates = [token_content(cfg.get(key))] + known
        for text in candidates:
            if text and tok.token_to_id(text) is not None:
                return text, tok.token_to_id(text), kind
    fail("the tokenizer has no BOS or EOS token that this script recognises (" + ", ".join(KNOWN_BOS + KNOWN_EOS) +
         "); name one with --delimiter-token")


def expand_inputs(patterns):
    files = []
    for p in patterns:
        matched = sorted(glob.glob(p)) if any(c in p for c in "*?[") else [p]
        if not matched:
            fail(f"input '{p}' matches no file")
        for f in matched:
            if not os.path.isfile(f):
                fail(f"input '{f}' is not a file")
            files.append(f)
    return files


def documents(files, skip):
    """Yields (index, text, bytes) in order, from index `skip` on."""
    index = 0
    for path in files:
        if path.endswith(".jsonl"):
            with open(path, encoding="utf-8") as f:
                for line_no, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    if index >= skip:
                        try:
                            text = json.loads(line)["text"]
                        except (ValueError, KeyError, TypeError):
                            fail(f"{path}:{line_no}: not a JSON object with a 'text' field")
                        if not isinstance(text, str):
                            fail(f"{path}:{line_no}: field 'text' is not a string")
                        yield index, text, len(line)
                    index += 1
        else:
            if index >= skip:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                yield index, text, os.path.getsize(path)
            index += 1


def init_worker(tokenizer_path):
    global _tokenizer
    from tokenizers import Tokenizer
    _tokenizer = Tokenizer.from_file(tokenizer_path)


def encode(item):
    index, text, nbytes = item
    return index, _tokenizer.encode(text, add_special_tokens=False).ids, nbytes


def write_shard(path, tokens, fmt):
    import numpy as np
    magic, version, _ = FORMATS[fmt]
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = magic, version, len(tokens)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2" if fmt == "uint16" else "<u4").tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Progress:
    def __init__(self, total_bytes, done_bytes):
        self.total, self.done, self.start, self.last = total_bytes, done_bytes, time.time(), 0.0
        self.start_done, self.docs, self.tokens = done_bytes, 0, 0

    def update(self, nbytes, ntokens, final=False):
        self.done += nbytes
        self.docs += 1
        self.tokens += ntokens
        now = time.time()
        if not final and now - self.last < 0.5:
            return
        self.last = now
        frac = self.done / self.total if self.total else 1.0
        rate = (self.done - self.start_done) / max(now - self.start, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        bar = "#" * int(30 * frac)
        eta_text = f"{eta:5.0f}s" if eta != float("inf") else "    ?"
        print(f"\r[{bar:<30}] {100 * frac:5.1f}%  {self.docs:,} docs  {self.tokens:,} tokens  "
              f"{self.done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB  {rate / 1e6:.2f} MB/s  ETA {eta_text}",
              end="\n" if final else "", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="text files or .jsonl files (globs allowed)")
    ap.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer.json")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per training shard (about)")
    ap.add_argument("--val-tokens", type=int, default=1_000_000, help="tokens in the held-out shard (about)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenizing processes")
    ap.add_argument("--delimiter-token", default="", help="the token put before every document (default: BOS, "
                                                          "else EOS)")
    args = ap.parse_args()
    if args.shard_tokens < 1 or args.val_tokens < 1:
        fail("--shard-tokens and --val-tokens must be >= 1")
    files = expand_inputs(args.inputs)
    tok = load_tokenizer(args.tokenizer)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    fmt = "uint16" if vocab <= 1 << 16 else "uint32"
    delim_text, delim_id, delim_kind = choose_delimiter(tok, args.tokenizer, args.delimiter_token)
    os.makedirs(args.out, exist_ok=True)
    ident = {"inputs": [os.path.abspath(f) for f in files], "tokenizer_sha256": sha256_of(args.tokenizer),
             "shard_tokens": args.shard_tokens, "val_tokens": args.val_tokens, "delimiter_id": delim_id}
    progress_path = os.path.join(args.out, "progress.json")
    state = {"next_document": 0, "done_bytes": 0, "val_shards": [], "train_shards": [], "documents": 0, "tokens": 0}
    if os.path.exists(progress_path):
        with open(progress_path) as f:
            saved = json.load(f)
        if saved.get("ident") != ident:
            fail(f"{args.out} holds a preparation of other inputs, tokenizer or sizes (progress.json differs); "
                 "use a new --out")
        state = saved["state"]
        print(f"prepare_data: resuming after document {state['next_document']:,} "
              f"({len(state['val_shards']) + len(state['train_shards'])} shards complete)", file=sys.stderr)
    print(f"prepare_data: {len(files)} input file(s), tokenizer vocab {vocab:,} -> {fmt} shards, delimiter "
          f"{delim_text!r} = {delim_id} ({delim_kind}), {args.workers} worker(s)", file=sys.stderr)

    total_bytes = sum(os.path.getsize(f) for f in files)
    bar = Progress(total_bytes, state["done_bytes"])
    buffer, buffer_bytes, buffer_docs = [], 0, 0

    def flush_shard(final=False):
        nonlocal buffer, buffer_bytes, buffer_docs
        if not buffer:
            return
        val = not state["val_shards"]
        name = (f"val_{len(state['val_shards']):06d}.bin" if val else f"train_{len(state['train_shards']):06d}.bin")
        write_shard(os.path.join(args.out, name), buffer, fmt)
        (state["val_shards"] if val else state["train_shards"]).append({"file": name, "tokens": len(buffer)})
        state["next_document"] += buffer_docs
        state["done_bytes"] += buffer_bytes
        state["documents"] += buffer_docs
        state["tokens"] += len(buffer)
        write_json(progress_path, {"ident": ident, "state": state})
        buffer, buffer_bytes, buffer_docs = [], 0, 0
        stop = os.environ.get("PREPARE_DATA_TEST_STOP_AFTER_SHARDS")  # test hook: an interrupted run
        if stop and len(state["val_shards"]) + len(state["train_shards"]) >= int(stop):
            os._exit(3)

    with mp.Pool(args.workers, initializer=init_worker, initargs=(args.tokenizer,)) as pool:
        for _, ids, nbytes in pool.imap(encode, documents(files, state["next_document"]), chunksize=16):
            buffer.append(delim_id)
            buffer.extend(ids)
            buffer_bytes += nbytes
            buffer_docs += 1
            bar.update(nbytes, len(ids) + 1)
            limit = args.val_tokens if not state["val_shards"] else args.shard_tokens
            if len(buffer) >= limit:
                flush_shard()
    flush_shard(final=True)
    bar.update(0, 0, final=True)
    if not state["val_shards"] or not state["train_shards"]:
        fail(f"the inputs hold {state['tokens']:,} tokens: not enough for a held-out shard of --val-tokens "
             f"{args.val_tokens:,} and at least one training shard; lower --val-tokens")
    magic, version, _ = FORMATS[fmt]
    meta = {
        "tokenizer": os.path.abspath(args.tokenizer), "tokenizer_sha256": ident["tokenizer_sha256"],
        "vocab_size": vocab, "delimiter_token": delim_text, "delimiter_id": delim_id, "delimiter_kind": delim_kind,
        "eot_token": delim_id,  # what data.eot_token (document packing) defaults from
        "token_dtype": fmt, "magic": magic, "version": version,
        "documents": state["documents"], "tokens": state["tokens"],
        "val_shards": state["val_shards"], "train_shards": state["train_shards"],
        "inputs": ident["inputs"],
    }
    write_json(os.path.join(args.out, "meta.json"), meta)
    print(f"prepare_data: wrote {len(state['train_shards'])} training shard(s) + {len(state['val_shards'])} held-out "
          f"({state['tokens']:,} tokens, {state['documents']:,} documents) and meta.json to {args.out}\n"
          f"  train with: data.source: shards, data.path: {args.out}/train_*.bin, data.eval_path: "
          f"{args.out}/val_*.bin, model.vocab_size >= {vocab}", file=sys.stderr)


if __name__ == "__main__":
    main()
