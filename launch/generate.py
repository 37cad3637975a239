#!/usr/bin/env python3
"""Text in, text out around `ringtrain generate` (which takes and returns token ids).

  launch/generate.py CONFIG --checkpoint DIR --text "Once upon a time" [--tokenizer tokenizer.json] [--np N]
                     [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--eos-id E]
                     [--prefill-chunk N] [--device-memory-gib G]

The tokenizer is a Hugging Face tokenizer.json read with the `tokenizers` package (launch/install-deps.sh
--prepare-data installs it); by default the one in the directory the checkpoint's weights came from (its
hf_source metadata, set by import-hf and kept through training). The text is encoded without the tokenizer's own
special tokens unless --add-special-tokens is given. --np N runs N ranks under mpirun (the config's grid, e.g.
cp = N), with --oversubscribe as launch/train.sh passes it (more ranks than cores is allowed); the default is one
process. Prints the continuation; --json prints ringtrain's JSON with a "text" field added.
Errors in the options or inputs exit with 2 and one line, `generate.py: error: ...`, never a traceback; ringtrain's
own exit code is passed on.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(message):
    print(f"generate.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def checkpoint_hf_source(checkpoint):
    path = checkpoint if checkpoint.endswith(".safetensors") else os.path.join(checkpoint, "model.safetensors")
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            size = os.fstat(f.fileno()).st_size
            if n > size - 8:  # a corrupted header length: never read (or allocate) past the file
                raise ValueError(f"its header length {n} is more than the file's {size} bytes")
            header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        meta = header.get("__metadata__", {})
        source = meta.get("hf_source", "") if isinstance(meta, dict) else ""
    except (OSError, ValueError, struct.error, MemoryError, OverflowError) as e:
        fail(f"cannot read the checkpoint's metadata from {path} ({e}); is --checkpoint a ringtrain checkpoint? "
             "give --tokenizer to skip it")
    return source if isinstance(source, str) else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--text", required=True, help="the prompt")
    ap.add_argument("--tokenizer", help="tokenizer.json (default: the checkpoint's HF source directory's)")
    ap.add_argument("--add-special-tokens", action="store_true", help="let the tokenizer add BOS and the like")
    ap.add_argument("--np", type=int, default=1, help="ranks (mpirun -np); 1 = no mpirun")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--ringtrain", default=os.path.join(HERE, "..", "build", "ringtrain"))
    ap.add_argument("--json", action="store_true", help="print the JSON result with the decoded text")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    for opt in ("--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--eos-id", "--prefill-chunk",
                "--device-memory-gib"):
        ap.add_argument(opt)
    args = ap.parse_args()
    for name, value in vars(args).items():  # `--opt=--` leaves a list where argparse should have refused
        if isinstance(value, list) and name != "set":
            fail(f"--{name.replace('_', '-')} needs a value")
    if args.np < 1:
        fail(f"--np {args.np} must be >= 1 (ranks under mpirun; 1 = no mpirun)")
    tok_path = args.tokenizer
    if not tok_path:
        source = checkpoint_hf_source(args.checkpoint)
        if not source:
            fail(f"{args.checkpoint} records no Hugging Face source directory; give --tokenizer path/to/tokenizer.json")
        tok_path = os.path.join(source, "tokenizer.json")
    if not os.path.isfile(tok_path):
        fail(f"tokenizer {tok_path} is not a file; give --tokenizer path/to/tokenizer.json")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        fail("the `tokenizers` package is missing; install it with launch/install-deps.sh --prepare-data")
    try:
        tokenizer = Tokenizer.from_file(tok_path)
    except Exception as e:  # noqa: BLE001 - the library raises plain Exceptions for a file it cannot parse
        fail(f"--tokenizer {tok_path} is not a Hugging Face tokenizer.json ({e}); give the model's tokenizer.json")
    ids = tokenizer.encode(args.text, add_special_tokens=args.add_special_tokens).ids
    if not ids:
        fail("the text encodes to no tokens; give a non-empty --text")
    if not os.path.exists(args.ringtrain):
        fail(f"{args.ringtrain} does not exist; build it (launch/build.sh) or give --ringtrain")
    with tempfile.TemporaryDirectory(prefix="rt_generate_") as tmp:
        ids_file, out_file = os.path.join(tmp, "prompt.json"), os.path.join(tmp, "out.json")
        with open(ids_file, "w") as f:
            json.dump(ids, f)
        cmd = [args.ringtrain, "generate", args.config, "--checkpoint", args.checkpoint, "--prompt-ids", ids_file,
               "--out", out_file]
        for opt in ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "eos_id", "prefill_chunk",
                    "device_memory_gib"):
            if getattr(args, opt) is not None:
                cmd += ["--" + opt.replace("_", "-"), getattr(args, opt)]
        for s in args.set:
            cmd += ["--set", s]
        if args.np > 1:  # the same oversubscription rule as launch/train.sh
            cmd = [args.mpirun, "-np", str(args.np), "--oversubscribe"] + cmd
        try:
            code = subprocess.call(cmd)
        except OSError as e:
            fail(f"cannot run {cmd[0]}: {e}")
        if code != 0:
            sys.exit(code)
        with open(out_file) as f:
            result = json.load(f)
    result["text"] = tokenizer.decode(result["new_ids"])
    if args.json:
        print(json.dumps(result))
    else:
        print(result["text"])


if __name__ == "__main__":
    main()
