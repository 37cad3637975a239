#!/usr/bin/env python3
"""Passkey / needle cases for `ringtrain eval --task needle --cases DIR` (teacher-forced: the answer's tokens are
part of the case; the eval checks the argmax of each and its log-probability).

  launch/make_needles.py --out DIR --tokenizer tokenizer.json [--haystack FILE] --max-length N [options]
  launch/make_needles.py --out DIR --bytes [--haystack FILE] --max-length N [options]
  launch/make_needles.py --out DIR --copy-task --vocab-size V --max-length N [options]

Tokens come from the data's tokenizer: a Hugging Face tokenizer.json (the `tokenizers` package; the identity
recorded is the file's sha256, as launch/prepare_data.py records it in the data's meta.json), raw UTF-8 bytes
(data.source: bytes), or --copy-task for data.source: copy (configs/tiny.yaml).

Text cases (tokenizer or bytes): an instruction, haystack text (--haystack: a text file, or JSONL with a "text"
field per line; else a built-in filler) cut to the length, the needle sentence (--kind passkey: a random 5-digit
pass key; needle: a fixed sentence) inserted at each depth (0 = right after the instruction, 1 = just before the
question), then the question and its answer. Each case has exactly its length in tokens (the pieces are
tokenized separately and concatenated).

Copy-task cases: a copy sample of the length (span S = (length - 1) // 2 random tokens, the separator vocab-1,
the same span again); the "passkey" is the --answer-tokens tokens at the depth inside the first span, and the
answer is their repeat in the second half (everything before it is teacher-forced context).

Lengths: --lengths a,b,c, or --num-lengths K log-spaced (powers of two) up to --max-length (the trained
data.seq_len; longer cases are refused by the eval). Depths: --depths, default 0,0.1,...,1.

Writes into --out (through <out>.partial, renamed when complete; --out must not exist or be empty, unless
--overwrite, which replaces it once the new cases are complete):
  case_000000.bin ...   each case's tokens, int32 little-endian
  cases.jsonl           one case a line: id, file, kind, length, depth, answer_begin, answer_end (token span of
                        the answer, end exclusive), answer (its text, when text)
  meta.json             tokenizer ("sha256:<hex>", "bytes" or "copy"), vocab_size, token_dtype, the options
Errors in the options or inputs exit with 2 and one line, `make_needles.py: error: ...`, never a traceback.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import sys

from case_tokens import Bytes, CaseError, HfTokenizer

FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ")
INSTRUCTION = ("There is an important piece of information hidden inside a lot of irrelevant text. "
               "Find it and memorize it. ")
NEEDLE = ("The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day. ",
          " What is the best thing to do in San Francisco? Answer: The best thing to do in San Francisco is",
          " eat a sandwich and sit in Dolores Park on a sunny day.")


def fail(msg):
    print(f"make_needles.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def haystack_text(path):
    if not path:
        return FILLER
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"--haystack '{path}': {e}")
    if path.endswith(".jsonl"):
        texts = []
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                texts.append(json.loads(line)["text"])
            except (ValueError, KeyError, TypeError):
                fail(f"--haystack '{path}' line {n}: not a JSON object with a \"text\" field")
        raw = " ".join(texts)
    if not raw.strip():
        fail(f"--haystack '{path}' holds no text; give a corpus file or leave --haystack out for the filler")
    return raw


def text_case(tok, hay_tokens, length, depth, kind, rng):
    if kind == "passkey":
        key = str(rng.randint(10000, 99999))
        needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
        question, answer = " What is the pass key? The pass key is", f" {key}."
    else:
        needle, question, answer = NEEDLE
    head, mid, q, a = tok.encode(INSTRUCTION), tok.encode(needle), tok.encode(question), tok.encode(answer)
    room = length - len(head) - len(mid) - len(q) - len(a)
    if room < 0:
        fail(f"length {length} is too short for the instruction, needle, question and answer "
             f"({length - room} tokens); use longer --lengths")
    hay = (hay_tokens * (room // max(len(hay_tokens), 1) + 1))[:room]
    at = round(depth * room)
    tokens = head + hay[:at] + mid + hay[at:] + q + a
    return tokens, len(tokens) - len(a), len(tokens), answer


def copy_case(vocab, length, depth, answer_tokens, rng):
    span = (length - 1) // 2
    if span < answer_tokens + 1:
        fail(f"length {length} (from --lengths, or --max-length and --num-lengths) is too short for a copy span of "
             f"more than --answer-tokens {answer_tokens}; give longer lengths or fewer --answer-tokens")
    x = [rng.randrange(vocab - 1) for _ in range(span)]
    tokens = x + [vocab - 1] + x
    tokens += [vocab - 1] * (length - len(tokens))
    offset = round(depth * (span - answer_tokens))
    begin = span + 1 + offset
    return tokens, begin, begin + answer_tokens, None


MAX_LENGTH = 2**31 - 1  # data.seq_len is a 32-bit integer
MAX_CASES = 1_000_000   # lengths x depths x samples
MAX_TOKENS = 2**28      # tokens of all cases together (1 GiB of int32)


def parse_list(text, kind, name):
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except (ValueError, OverflowError):
        fail(f"{name} '{text}' is not a comma-separated list of numbers")
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        fail(f"{name} '{text}' holds a value that is not a finite number")
    return values


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokenizer", help="the data's tokenizer.json")
    src.add_argument("--bytes", action="store_true", help="UTF-8 bytes (data.source: bytes)")
    src.add_argument("--copy-task", action="store_true", help="copy-task samples (data.source: copy)")
    ap.add_argument("--vocab-size", type=int, default=0, help="--copy-task: model.vocab_size")
    ap.add_argument("--haystack", help="text file or JSONL (\"text\" per line); default: a built-in filler")
    ap.add_argument("--kind", choices=["passkey", "needle"], default="passkey")
    ap.add_argument("--max-length", type=int, required=True, help="the trained data.seq_len")
    ap.add_argument("--lengths", help="comma-separated case lengths (default: --num-lengths up to --max-length)")
    ap.add_argument("--num-lengths", type=int, default=4)
    ap.add_argument("--depths", default="0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1")
    ap.add_argument("--samples", type=int, default=1, help="cases per (length, depth)")
    ap.add_argument("--answer-tokens", type=int, default=5, help="--copy-task: tokens in the passkey")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out (once the new cases are "
                                                             "complete)")
    args = ap.parse_args()
    for name, value in vars(args).items():  # `--opt=--` leaves a list where argparse should have refused
        if isinstance(value, list):
            fail(f"--{name.replace('_', '-')} needs a value")

    if not 2 <= args.max_length <= MAX_LENGTH:
        fail(f"--max-length {args.max_length} is outside [2, {MAX_LENGTH}] (the trained data.seq_len)")
    if args.lengths:
        lengths = parse_list(args.lengths, int, "--lengths")
        if not lengths:
            fail(f"--lengths '{args.lengths}' holds no length; give e.g. --lengths 1024,2048")
    else:
        most = int(math.log2(args.max_length))  # halving --max-length that often still leaves >= 2 tokens
        if not 1 <= args.num_lengths <= most:
            fail(f"--num-lengths {args.num_lengths} is outside [1, {most}]: the lengths halve from --max-length "
                 f"{args.max_length} and must stay >= 2")
        lengths, n = [], args.max_length
        for _ in range(args.num_lengths):
            lengths.insert(0, n)
            n //= 2
    too_long = [n for n in lengths if n > args.max_length or n < 2]
    if too_long:
        fail(f"--lengths {too_long} are outside [2, --max-length {args.max_length}] (the trained data.seq_len)")
    depths = parse_list(args.depths, float, "--depths")
    if not depths or not all(0 <= d <= 1 for d in depths):  # (nan is refused: it compares false)
        fail(f"--depths '{args.depths}' must be numbers in [0, 1]")
    if args.samples < 1:
        fail("--samples must be >= 1")
    if len(lengths) * len(depths) * args.samples > MAX_CASES:
        fail(f"{len(lengths)} lengths x {len(depths)} depths x --samples {args.samples} is more than {MAX_CASES} "
             "cases; give fewer")
    if sum(lengths) * len(depths) * args.samples > MAX_TOKENS:
        fail(f"the cases would hold {sum(lengths) * len(depths) * args.samples} tokens, more than {MAX_TOKENS}; give "
             "shorter --lengths (or --max-length), fewer --depths or --samples")
    if args.copy_task and not 1 <= args.answer_tokens <= MAX_LENGTH:
        fail(f"--answer-tokens {args.answer_tokens} is outside [1, {MAX_LENGTH}] (tokens in the passkey, e.g. 5)")
    if args.copy_task and not 3 <= args.vocab_size <= MAX_LENGTH:
        fail(f"--copy-task needs --vocab-size in [3, {MAX_LENGTH}] (the config's model.vocab_size), not "
             f"{args.vocab_size}")

    if args.copy_task:
        if args.vocab_size < 3:
            fail("--copy-task needs --vocab-size (the config's model.vocab_size, at least 3)")
        if args.haystack:
            fail("--haystack is for text cases; the copy task's haystack is random tokens")
        identity, vocab = "copy", args.vocab_size
        tok = None
    else:
        try:
            tok = Bytes() if args.bytes else HfTokenizer(args.tokenizer)
        except (CaseError, OSError) as e:
            fail(f"--tokenizer: {e}")
        identity, vocab = tok.identity, tok.vocab_size
        hay_tokens = tok.encode(haystack_text(args.haystack))

    out = args.out.rstrip("/") or args.out
    replace = os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out))
    if replace and not args.overwrite:
        fail(f"--out '{out}' exists and is not an empty directory; choose a new one, or pass --overwrite to replace "
             "it")
    if replace and not os.path.isdir(out):
        fail(f"--out '{out}' is a file; give a directory")
    if not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        fail(f"--out '{out}': its directory {os.path.dirname(os.path.abspath(out))} does not exist; create it first")
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    try:
        rng = random.Random(args.seed)
        lines, k = [], 0
        for length in lengths:
            for depth in depths:
                for _ in range(args.samples):
                    if args.copy_task:
                        tokens, begin, end, answer = copy_case(vocab, length, depth, args.answer_tokens, rng)
                    else:
                        tokens, begin, end, answer = text_case(tok, hay_tokens, length, depth, args.kind, rng)
                    name = f"case_{k:06d}.bin"
                    with open(os.path.join(partial, name), "wb") as f:
                        f.write(struct.pack(f"<{len(tokens)}i", *tokens))
                    line = {"id": k, "file": name, "kind": "copy" if args.copy_task else args.kind,
                            "length": len(tokens), "depth": depth, "answer_begin": begin, "answer_end": end}
                    if answer is not None:
                        line["answer"] = answer
                    lines.append(json.dumps(line))
                    k += 1
        with open(os.path.join(partial, "cases.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
        meta = {"format": "ringtrain-needles", "version": 1, "tokenizer": identity, "vocab_size": vocab,
                "token_dtype": "int32-le", "cases": k, "lengths": lengths, "depths": depths,
                "kind": "copy" if args.copy_task else args.kind, "seed": args.seed,
                "haystack": os.path.abspath(args.haystack) if args.haystack else "built-in filler"}
        with open(os.path.join(partial, "meta.json"), "w") as f:
            json.dump(meta, f, indent=2)
        if replace:  # --overwrite: the old cases go only once the new ones are complete
            old = out + ".replaced"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(out, old)
            os.rename(partial, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            if os.path.isdir(out):
                os.rmdir(out)
            os.rename(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    print(f"make_needles.py: wrote {k} cases ({len(lengths)} lengths x {len(depths)} depths x {args.samples}) "
          f"to {out} (tokenizer {identity}, vocab {vocab})")


if __name__ == "__main__":
    try:
        main()
    except CaseError as e:
        fail(str(e))
    except OSError as e:  # a full disk, a directory that cannot be written
        fail(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")
