#!/usr/bin/env python3
"""Tokenize text into llm.c token shards for `data.source: shards`.

  launch/prepare_data.py --tokenizer path/to/tokenizer.json --out data/mycorpus INPUT... [options]

INPUT: text files (each file is one document) or JSONL files (*.jsonl, one document per line, its `text`
field); globs are expanded. The inputs must be UTF-8: a byte that is not is refused, naming the file and its
offset (--errors replace substitutes U+FFFD instead, and says in how many files). A file with a NUL byte in its
first 8 KiB (a binary file, or UTF-16) and an empty file are skipped with a warning naming them; so are
documents of white space only. The tokenizer is a local Hugging Face tokenizer.json, read with the `tokenizers`
package (install it with `launch/install-deps.sh --prepare-data`); the shards are written with NumPy.

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
ETA. Everything is written into <out>.partial/, renamed to --out once complete; --out must not exist (or be an
empty directory), unless --overwrite, which replaces it then. Each shard is written to a temporary file and renamed, and progress.json records what is
complete: after an interruption (Ctrl-C, a kill), running the same command again resumes after the last complete
shard. On an error (a bad input, too few documents, a full disk) <out>.partial/ is removed, so nothing
half-written is left. Errors in the inputs or the options exit with 2.
"""
import argparse
import glob
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import sys
import time

HEADER_INTS = 256
FORMATS = {"uint16": (20240520, 1, 2), "uint32": (20240801, 7, 4)}
KNOWN_BOS = ["<|begin_of_text|>", "<s>", "<bos>", "[BOS]", "<|startoftext|>"]
KNOWN_EOS = ["<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[EOS]"]

BINARY_PROBE = 8192  # a NUL byte in this many first bytes makes a file binary
ERROR = -1  # documents() yields (ERROR, message, 0) for a bad input: raising there would end only the Pool's thread

_tokenizer = None
_bar_open = False  # the progress line is not ended yet


class InputError(Exception):
    """A problem with the inputs: printed as one line, exit 2."""


def fail(msg, code=2):
    global _bar_open
    if _bar_open:
        print(file=sys.stderr)
        _bar_open = False
    print(f"prepare_data: error: {msg}", file=sys.stderr)
    sys.exit(code)


def warn(msg):
    print(f"prepare_data: warning: {msg}", file=sys.stderr)


def named(paths, most=5):
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def check_numpy():
    try:
        import numpy  # noqa: F401  (the shards are written with it; checked before any work)
    except ImportError:
        fail("NumPy is missing (the shards are written with it); install it: apt install python3-numpy, or "
             "pip install numpy")


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        fail("the `tokenizers` package is missing; run launch/install-deps.sh --prepare-data")
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # the package raises its own exception types
        fail(f"--tokenizer '{path}' cannot be read: {e}")


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


def screen_files(files):
    """-> the files to read; warns about the binary and the empty ones, which are skipped."""
    keep, binary, empty = [], [], []
    for path in files:
        try:
            with open(path, "rb") as f:
                head = f.read(BINARY_PROBE)
        except OSError as e:
            fail(f"cannot read input '{path}': {e.strerror}")
        if not head:
            empty.append(path)
            continue
        nul = head.find(b"\0")
        if nul >= 0:
            binary.append(f"{path} (byte {nul})")
        else:
            keep.append(path)
    if binary:
        warn(f"skipping {len(binary)} binary file(s), with a NUL byte (binary data, or UTF-16 text: convert it "
             f"with iconv -f UTF-16 -t UTF-8): {named(binary)}")
    if empty:
        warn(f"skipping {len(empty)} empty file(s): {named(empty)}")
    return keep


def decode(raw, path, where, offset, errors, stats):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if errors == "strict":
            raise InputError(f"{where}: byte {offset + e.start} of the file (0x{raw[e.start]:02x}) is not UTF-8; "
                             f"convert the file (e.g. iconv -f LATIN1 -t UTF-8), or pass --errors replace to "
                             f"substitute U+FFFD") from None
        stats["replaced"].add(path)
        return raw.decode("utf-8", errors="replace")


def jsonl_text(line, where):
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise InputError(f"{where}: not JSON ({getattr(e, 'msg', e)}); each line must be an object such as "
                         '{"text": "..."}') from None
    if not isinstance(obj, dict) or "text" not in obj:
        raise InputError(f"{where}: no 'text' field; each line must be an object such as " + '{"text": "..."}')
    text = obj["text"]
    if not isinstance(text, str):
        raise InputError(f"{where}: field 'text' is {json.dumps(text)[:40]}, not a string")
    return text


def documents(files, skip, errors, stats):
    """Yields (index, text, bytes) in order, from index `skip` on; documents of white space only are counted in
    stats['blank'] and not yielded (they keep their index, so that a resumed run counts as the first did)."""
    index = 0
    for path in files:
        if path.endswith(".jsonl"):
            offset = 0
            with open(path, "rb") as f:
                for line_no, raw in enumerate(f, 1):
                    where, start = f"{path}:{line_no}", offset
                    offset += len(raw)
                    if not raw.strip():
                        continue
                    if index >= skip:
                        text = jsonl_text(decode(raw, path, where, start, errors, stats), where)
                        try:
                            text.encode("utf-8")
                        except UnicodeEncodeError:  # a lone surrogate escape such as \ud800
                            if errors == "strict":
                                raise InputError(f"{where}: field 'text' holds an escaped lone surrogate (\\ud800-"
                                                 "\\udfff), which is not UTF-8; fix the line, or pass --errors "
                                                 "replace") from None
                            stats["replaced"].add(path)
                            text = text.encode("utf-8", errors="replace").decode("utf-8")
                        if text.strip():
                            yield index, text, len(raw)
                        else:
                            stats["blank"] += 1
                    index += 1
        else:
            if index >= skip:
                with open(path, "rb") as f:
                    raw = f.read()
                text = decode(raw, path, path, 0, errors, stats)
                if text.strip():
                    yield index, text, len(raw)
                else:
                    stats["blank"] += 1
            index += 1


def safe_documents(files, skip, errors, stats):
    """documents(), with any error passed on as an item: Pool.imap runs this generator in a thread of its own,
    where an exception would end that thread only and leave the main one waiting forever."""
    try:
        yield from documents(files, skip, errors, stats)
    except InputError as e:
        yield ERROR, str(e), 0
    except OSError as e:
        yield ERROR, f"cannot read {e.filename}: {e.strerror}", 0
    except Exception as e:  # anything else, as a value too
        yield ERROR, f"reading the inputs failed: {type(e).__name__}: {e}", 0


def init_worker(tokenizer_path):
    global _tokenizer
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the main process ends the pool
    from tokenizers import Tokenizer
    _tokenizer = Tokenizer.from_file(tokenizer_path)


def encode(item):
    index, text, nbytes = item
    if index == ERROR:
        return item
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
        global _bar_open
        self.done += nbytes
        self.docs += 0 if final else 1
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
        _bar_open = not final


def out_paths(out_arg, overwrite=False):
    """-> (out, partial): --out normalised (a trailing slash dropped) and the directory written before the rename.
    overwrite (--overwrite): a directory that holds files may be replaced (once the new preparation is complete)."""
    if not out_arg.strip():
        fail("--out is empty; name a new directory, e.g. --out data/mycorpus")
    out = os.path.normpath(out_arg)
    if os.path.abspath(out) in (os.path.abspath(os.sep), os.getcwd()):
        fail(f"--out '{out_arg}' is the root or the current directory; name a new directory, e.g. --out "
             "data/mycorpus")
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"--out '{out_arg}' is a file, not a directory; name a new directory")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        what = "a complete preparation (meta.json)" if os.path.exists(os.path.join(out, "meta.json")) else "files"
        fail(f"--out '{out}' already holds {what}; name a new directory, or pass --overwrite to replace it once the "
             "new preparation is complete (nothing is overwritten without it)")
    partial = out + ".partial"
    if os.path.exists(partial) and not os.path.isdir(partial):
        fail(f"'{partial}' (where --out is prepared) is a file; remove it or name another --out")
    return out, partial


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="text files or .jsonl files (globs allowed)")
    ap.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer.json")
    ap.add_argument("--out", required=True, help="output directory (new, or empty)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out (once the new preparation "
                                                             "is complete)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per training shard (about)")
    ap.add_argument("--val-tokens", type=int, default=1_000_000, help="tokens in the held-out shard (about)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="tokenizing processes")
    ap.add_argument("--delimiter-token", default="", help="the token put before every document (default: BOS, "
                                                          "else EOS)")
    ap.add_argument("--errors", choices=["strict", "replace"], default="strict",
                    help="bytes that are not UTF-8: refuse them (strict, the default) or substitute U+FFFD")
    args = ap.parse_args()
    for name, value in vars(args).items():  # `--opt=--` leaves a list where argparse should have refused
        if isinstance(value, list) and name != "inputs":
            fail(f"--{name.replace('_', '-')} needs a value")
    if args.shard_tokens < 1 or args.val_tokens < 1:
        fail("--shard-tokens and --val-tokens must be >= 1")
    if args.workers < 1:
        fail(f"--workers must be >= 1 (got {args.workers}); leave it out to use every core ({os.cpu_count() or 1})")
    check_numpy()
    out, partial = out_paths(args.out, args.overwrite)
    files = expand_inputs(args.inputs)
    tok = load_tokenizer(args.tokenizer)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    fmt = "uint16" if vocab <= 1 << 16 else "uint32"
    delim_text, delim_id, delim_kind = choose_delimiter(tok, args.tokenizer, args.delimiter_token)
    ident = {"inputs": [os.path.abspath(f) for f in files], "tokenizer_sha256": sha256_of(args.tokenizer),
             "shard_tokens": args.shard_tokens, "val_tokens": args.val_tokens, "delimiter_id": delim_id,
             "errors": args.errors}
    progress_path = os.path.join(partial, "progress.json")
    state = {"next_document": 0, "done_bytes": 0, "val_shards": [], "train_shards": [], "documents": 0, "tokens": 0}
    if os.path.exists(progress_path):
        try:
            with open(progress_path) as f:
                saved = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"cannot read {progress_path} ({e}); remove {partial} to start over")
        if saved.get("ident") != ident:
            fail(f"{partial} holds an interrupted preparation of other inputs, tokenizer or sizes (progress.json "
                 f"differs); run that command again to finish it, or remove {partial}")
        state = saved["state"]
        print(f"prepare_data: resuming after document {state['next_document']:,} "
              f"({len(state['val_shards']) + len(state['train_shards'])} shards complete in {partial})",
              file=sys.stderr)
    elif os.path.isdir(partial) and os.listdir(partial):
        fail(f"{partial} holds files but no progress.json; remove it")
    print(f"prepare_data: {len(files)} input file(s), tokenizer vocab {vocab:,} -> {fmt} shards, delimiter "
          f"{delim_text!r} = {delim_id} ({delim_kind}), {args.workers} worker(s)", file=sys.stderr)
    files = screen_files(files)
    try:
        prepare(args, files, out, partial, progress_path, ident, state, vocab, fmt, delim_text, delim_id, delim_kind)
    except InputError as e:
        shutil.rmtree(partial, ignore_errors=True)
        fail(str(e))
    except KeyboardInterrupt:
        if not os.path.exists(progress_path):  # no shard was complete: nothing to resume
            shutil.rmtree(partial, ignore_errors=True)
            fail("interrupted before the first shard was complete; nothing was kept", code=130)
        fail(f"interrupted; the complete shards are kept in {partial}: run the same command again to resume",
             code=130)
    except SystemExit as e:
        if e.code:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        fail(f"cannot write {e.filename or partial}: {e.strerror or e}; free space or choose another --out "
             f"({partial} was removed)", code=1)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def prepare(args, files, out, partial, progress_path, ident, state, vocab, fmt, delim_text, delim_id, delim_kind):
    os.makedirs(partial, exist_ok=True)
    total_bytes = sum(os.path.getsize(f) for f in files)
    bar = Progress(total_bytes, state["done_bytes"])
    buffer, buffer_bytes, buffer_docs = [], 0, 0
    last_index, last_doc_tokens = state["next_document"] - 1, 0
    stats = {"blank": 0, "replaced": set()}

    def flush_shard(final=False):
        nonlocal buffer, buffer_bytes, buffer_docs
        if not buffer:
            return
        val = not state["val_shards"]
        name = (f"val_{len(state['val_shards']):06d}.bin" if val else f"train_{len(state['train_shards']):06d}.bin")
        write_shard(os.path.join(partial, name), buffer, fmt)
        (state["val_shards"] if val else state["train_shards"]).append({"file": name, "tokens": len(buffer)})
        state["next_document"] = last_index + 1
        state["done_bytes"] += buffer_bytes
        state["documents"] += buffer_docs
        state["tokens"] += len(buffer)
        write_json(progress_path, {"ident": ident, "state": state})
        buffer, buffer_bytes, buffer_docs = [], 0, 0
        stop = os.environ.get("PREPARE_DATA_TEST_STOP_AFTER_SHARDS")  # test hook: an interrupted run
        if stop and len(state["val_shards"]) + len(state["train_shards"]) >= int(stop):
            os._exit(3)

    items = safe_documents(files, state["next_document"], args.errors, stats)
    with mp.Pool(args.workers, initializer=init_worker, initargs=(args.tokenizer,)) as pool:
        for index, ids, nbytes in pool.imap(encode, items, chunksize=16):
            if index == ERROR:
                raise InputError(ids)
            buffer.append(delim_id)
            buffer.extend(ids)
            buffer_bytes += nbytes
            buffer_docs += 1
            last_index, last_doc_tokens = index, len(ids) + 1
            bar.update(nbytes, len(ids) + 1)
            limit = args.val_tokens if not state["val_shards"] else args.shard_tokens
            if len(buffer) >= limit:
                flush_shard()
    flush_shard(final=True)
    bar.update(0, 0, final=True)
    if stats["blank"]:
        warn(f"skipped {stats['blank']:,} document(s) of white space only")
    if stats["replaced"]:
        warn(f"--errors replace: bytes that are not UTF-8 became U+FFFD in {len(stats['replaced'])} file(s): "
             f"{named(sorted(stats['replaced']))}")
    if not state["val_shards"] or not state["train_shards"]:
        docs, tokens = state["documents"], state["tokens"]
        if docs == 0:
            raise InputError("no documents to tokenize: every input was empty, binary or white space only")
        if docs < 2:
            raise InputError(f"the inputs hold 1 document ({tokens:,} tokens), and documents are never split: a "
                             "held-out shard and a training shard need at least 2 (each text file is one document, "
                             "each JSONL line is one); add input files, or split the text into several files or "
                             "JSONL lines")
        hint = (f"lower --val-tokens to at most {tokens - last_doc_tokens:,}, which leaves the last document for "
                "training" if last_doc_tokens else "lower --val-tokens")
        raise InputError(f"the held-out shard took all {docs:,} documents ({tokens:,} tokens): it takes whole "
                         f"documents, the first ones, until it holds --val-tokens {args.val_tokens:,}; {hint}")
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
    write_json(os.path.join(partial, "meta.json"), meta)
    if os.path.isdir(out) and os.listdir(out):  # --overwrite (checked at the start): the old one goes only now
        old = out + ".replaced"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(out, old)
        os.rename(partial, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked at the start)
        os.rename(partial, out)
    print(f"prepare_data: wrote {len(state['train_shards'])} training shard(s) + {len(state['val_shards'])} held-out "
          f"({state['tokens']:,} tokens, {state['documents']:,} documents) and meta.json to {out}\n"
          f"  train with: data.source: shards, data.path: {out}/train_*.bin, data.eval_path: "
          f"{out}/val_*.bin, model.vocab_size >= {vocab}", file=sys.stderr)


if __name__ == "__main__":
    main()
