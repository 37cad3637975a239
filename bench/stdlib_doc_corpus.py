#!/usr/bin/env python3
"""A corpus of real packed documents for `data.source: bytes` with `data.documents: eot`, `data.eot_token: 0`.

The documents are the .py files of the Python standard library of the interpreter that runs this script
(sysconfig's `stdlib` path; site-packages, dist-packages and __pycache__ left out), taken whole in sorted order of
their path relative to that directory and joined with one NUL byte (0) between two files, so each NUL starts the
next document. Files are added while the corpus stays within --max-bytes (default 8,000,000: about the first
quarter of CPython 3.11's 31 MB, `__future__.py` to `lib2to3/`); a file that would cross the cap ends the corpus.
--max-file-bytes N keeps only the files of at most N bytes (short documents, several per sample at a short
data.seq_len: the CPU test's corpus). Empty files and files that contain a NUL byte themselves are skipped.

  python3 bench/stdlib_doc_corpus.py --out corpus.bin [--max-bytes 8000000] [--max-file-bytes 0]

Writes the corpus and prints one line: the stdlib directory, files, bytes, and the documents' mean and median
length. --lengths FILE also writes each document's length in tokens (its NUL included, one per line), the format of
`ringtrain plan <config> --doc-lengths FILE`.
"""
import argparse
import os
import sys
import sysconfig

SKIPPED_DIRS = {"site-packages", "dist-packages", "__pycache__"}


def stdlib_py_files(root):
    """The .py files under root, as (path relative to root, absolute path), sorted by the relative path."""
    found = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIPPED_DIRS]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                found.append((os.path.relpath(path, root), path))
    found.sort()
    return found


def build_corpus(files, max_bytes, max_file_bytes):
    """The corpus bytes and each document's length in tokens (the NUL that starts it included, but for the first)."""
    parts, lengths, size = [], [], 0
    for _, path in files:
        if max_file_bytes and os.path.getsize(path) > max_file_bytes:
            continue
        with open(path, "rb") as f:
            text = f.read()
        if not text or b"\0" in text:
            continue
        add = len(text) + (1 if parts else 0)
        if size + add > max_bytes:
            break
        if parts:
            parts.append(b"\0")
        parts.append(text)
        lengths.append(add)
        size += add
    return b"".join(parts), lengths


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the corpus file to write")
    ap.add_argument("--max-bytes", type=int, default=8_000_000, help="cap on the corpus size (whole files only)")
    ap.add_argument("--max-file-bytes", type=int, default=0, help="keep only files of at most this size (0: all)")
    ap.add_argument("--lengths", help="also write the documents' lengths, one per line")
    args = ap.parse_args()
    root = sysconfig.get_paths()["stdlib"]
    corpus, lengths = build_corpus(stdlib_py_files(root), args.max_bytes, args.max_file_bytes)
    if len(lengths) < 2:
        sys.exit(f"stdlib_doc_corpus.py: {len(lengths)} document(s) from {root} within the caps "
                 f"(--max-bytes {args.max_bytes}, --max-file-bytes {args.max_file_bytes}); packed documents need "
                 "at least 2")
    tmp = args.out + ".partial"
    with open(tmp, "wb") as f:
        f.write(corpus)
    os.replace(tmp, args.out)  # a corpus file that exists is complete
    if args.lengths:
        with open(args.lengths, "w") as f:
            f.write("".join(f"{n}\n" for n in lengths))
    ordered = sorted(lengths)
    print(f"stdlib_doc_corpus.py: {root}: {len(lengths)} documents, {len(corpus)} bytes, mean length "
          f"{len(corpus) / len(lengths):.0f}, median {ordered[len(ordered) // 2]} -> {args.out}")


if __name__ == "__main__":
    main()
