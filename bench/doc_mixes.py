#!/usr/bin/env python3
"""The packed-document mixes the document benchmarks share, and one run of bench_doc_ring_steps on a length file.

bench/doc_attention_side_by_side.py (ours against FA4 varlen, FlexAttention and the dense ceiling),
bench/doc_candidates_study.py (the chooser's pick against its candidates) and bench/fit_ring_time_model.py draw the
same seeded samples from here, so a (N, mix, seed) names the same documents in each of them.

Mixes (seeded; the last document is cut at N):
  stdlib      the committed length file tests/data/python_stdlib_doc_lengths.txt, shuffled;
  short       uniform 1K..4K tokens;
  short_long  3 in 4 short (1K..4K), else long (8K..32K);
  magi        each length drawn from the stdlib file, scaled by N / 64K and clipped to N/4;
  one         one document of N tokens (the causal case).

  python3 bench/doc_mixes.py --n 65536 --mix magi [--seed 1]   # the mix's lengths, one per line (no GPU)
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STDLIB_LENGTHS = os.path.join(ROOT, "tests", "data", "python_stdlib_doc_lengths.txt")
MIXES = ("stdlib", "short", "short_long", "magi", "one")
MAGI_REFERENCE_N = 65536  # the magi mix draws the stdlib file's lengths as they are at this N, scaled with N


def read_lengths(path):
    """One positive integer per line; '#' starts a comment (parallel/schedule/doc_balance.h's format)."""
    out = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            value = int(text)
            if value <= 0:
                raise ValueError(f"{path}:{number}: document length {value} is not positive")
            out.append(value)
    if not out:
        raise ValueError(f"{path}: no document lengths")
    return out


def write_lengths(path, lengths):
    """The lengths, one per line: the file read_lengths and bench_doc_ring_steps --lengths read."""
    with open(path, "w") as f:
        f.write("\n".join(str(length) for length in lengths) + "\n")


def make_mix(name, n, seed, stdlib):
    """Document lengths of one n-token sample for mix `name`, seeded; the last document is cut at n."""
    rng = random.Random(f"{name}:{n}:{seed}")
    if name == "one":
        return [n]
    if name == "stdlib":
        pool = list(stdlib)
        rng.shuffle(pool)
        draw = iter(pool[i % len(pool)] for i in range(10**9))
        next_length = lambda: next(draw)
    elif name == "short":
        next_length = lambda: rng.randint(1024, 4096)
    elif name == "short_long":
        next_length = lambda: rng.randint(8192, 32768) if rng.randrange(4) == 0 else rng.randint(1024, 4096)
    elif name == "magi":
        next_length = lambda: magi_length(rng.choice(stdlib), n)
    else:
        raise ValueError(f"unknown mix '{name}'; valid mixes: {', '.join(MIXES)}")
    lengths, total = [], 0
    while total < n:
        length = min(next_length(), n - total)
        lengths.append(length)
        total += length
    return lengths


def magi_length(stdlib_length, n):
    """One stdlib length scaled to an n-token sample and clipped to n/4 (the magi mix)."""
    return min(max(1, round(stdlib_length * n / MAGI_REFERENCE_N)), n // 4)


def visible_pairs(lengths):
    """(query, key) pairs under the document mask: query i sees keys doc_start(i)..i."""
    return sum(length * (length + 1) // 2 for length in lengths)


def run_ours(binary, lengths_path, args, selection):
    """One bench_doc_ring_steps run on a length file with args' shape and timing and `selection` (its --layout /
    --scheme / --candidate arguments): its JSON object, or {"error": last line} when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        json_path = os.path.join(tmp, "ours.json")
        cmd = [binary, "--lengths", lengths_path, "--cp", str(args.cp), "--d", str(args.d), "--h", str(args.heads),
               "--kv-heads", str(args.kv_heads), "--warmup", str(args.warmup), "--reps", str(args.reps), "--timing",
               args.timing, "--json", json_path] + list(selection)
        if getattr(args, "doc_plans", None):  # the document set-up per step (default) or per call (issue 46)
            cmd += ["--doc-plans", args.doc_plans]
        print("+ " + " ".join(cmd), flush=True)
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(run.stdout)
        if run.returncode != 0:
            return {"error": run.stdout.strip().splitlines()[-1] if run.stdout.strip() else f"exit {run.returncode}"}
        with open(json_path) as f:
            return json.loads(f.readline())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=65536, help="tokens in the sample")
    ap.add_argument("--mix", default="stdlib", choices=MIXES)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lengths", default=STDLIB_LENGTHS, help="the length file of the stdlib and magi mixes")
    args = ap.parse_args()
    if args.n <= 0:
        ap.error(f"--n {args.n} must be positive")
    for length in make_mix(args.mix, args.n, args.seed, read_lengths(args.lengths)):
        print(length)
    return 0


if __name__ == "__main__":
    sys.exit(main())
