#!/usr/bin/env python3
"""Document-masked attention side by side on one GPU, in one job (issue 20's benchmark).

For each N in --n (16K, 64K, 128K) and each document-length mix in --mixes, one packed sample (B = 1, H = 16
query heads, --kv-heads K/V heads (default H; fewer is GQA), d = 128, bf16), and on it:
  ours        bench_doc_ring_steps (bench/doc_ring_steps.cu): one document-masked call, fwd and bwd, and with
              --scheme ring (default) the cp=8 ring's document-masked kernel calls run in sequence on this GPU (as
              bench_ring_steps does) against that whole call, plus the ring's critical path (per step the slowest
              rank's call); with --scheme gather the gather scheme's calls (parallel/schedule/gather_plan.h: per rank its own
              keys and exactly the key rows it sees) and their paths, compute only and with the NVLink model, the
              one-launch forward and backward as RingAttention runs them: attn_fwd_work_list / attn_bwd_work_list by
              default, attn_fwd_whole_two_kv / attn_bwd_block_fresh_two_kv with RT_ATTN_WORK_LIST=0 in the
              environment (the row's ours.one_fwd_work_list / ours.one_bwd_work_list say which, per rank; printed per
              row and in the --candidates tables as "one launch per rank fwd / bwd");
  fa4         FlashAttention-4's flash_attn_varlen_func with cu_seqlens (when flash_attn.cute imports);
  flex        PyTorch FlexAttention with a document block mask, torch.compile'd (the block mask is built once per
              sample, outside the timing, as a trainer builds it once per batch);
  dense       the ceiling: dense causal SDPA (cuDNN, else FLASH) at N = each document's length, the documents of
              one length batched into one call, the calls of all lengths summed.
TFLOP/s are counted on the visible (query, key) pairs for every contender: 4*d FLOPs per pair forward, 10*d
backward, per head (pairs = sum of L (L + 1) / 2). Median of --reps CUDA-event timings after --warmup runs; the
first runs of each shape (FA4's and torch.compile's compilation) are warm-ups and never timed. PyTorch
contenders' backward = median(fwd + bwd) - median(fwd), as bench/sdpa_side_by_side.py does.

Mixes (bench/doc_mixes.py, seeded by --seed, the same for every contender; the last document is cut at N):
  stdlib      the committed length file tests/data/python_stdlib_doc_lengths.txt, shuffled;
  short       uniform 1K..4K tokens;
  short_long  3 in 4 short (1K..4K), else long (8K..32K);
  magi        MagiAttention-like (issue 33): a real long-tailed distribution with every document <= N/4. Each length
              is drawn with replacement from the stdlib length file (a real distribution: median ~2K tokens, one file
              in 20 over 16K), scaled by N / 64K so the mask has the same shape at every N (at 64K the file's own
              lengths), rounded, and clipped to N/4: the scaled file, not a fitted log-normal;
  one         one document of N tokens (the causal case: ours should match its plain causal numbers).

Usage (on the GPU machine, from a checkout with a CUDA build):
  python3 bench/doc_attention_side_by_side.py --ours build-gpu/bench/bench_doc_ring_steps \
      [--n 16384,65536,131072] [--mixes stdlib,short,short_long,magi] [--cp 8] [--layout balanced] \
      [--scheme ring|gather] [--heads 16] [--kv-heads 16] [--jsonl FILE] [--out table.md] [--skip fa4,flex,dense]
  python3 bench/doc_attention_side_by_side.py --dry-run   # CPU: the mixes and their pair counts, no GPU
  python3 bench/doc_attention_side_by_side.py --self-test [--ours BINARY]  # CPU: the mixes and pair counts,
      and with --ours that bench_doc_ring_steps --plan-only counts the same pairs and, with --scheme gather, receives
      the rows a brute force over positions says (ctest)
Each JSONL row records the scheme, layout, cp, heads and kv_heads it ran with.

The chooser against its candidates (bench/doc_candidates_study.py): per (N, mix), the candidates the chooser priced
(bench_doc_ring_steps --list-candidates), then one run of its pick (--scheme auto) and one of each of the K
best-predicted distinct candidates besides it (the best ring and the best gather candidate always among them), each a
JSONL row with its `candidate` label and `predicted_*`; a markdown table per sample: each candidate's measured fwd /
bwd critical path with communication and "pick / best measured", flagged above 1.05. No FA4 / Flex / dense there.
  python3 bench/doc_attention_side_by_side.py --ours build-gpu/bench/bench_doc_ring_steps --candidates 4 \
      --n 65536,131072 --mixes stdlib,short,magi,one [--cp 8] [--heads 32 --kv-heads 8] --jsonl study.jsonl
  python3 bench/doc_attention_side_by_side.py --summarize study.jsonl [...]  # CPU: the tables again from the rows
--self-test --lister build-cpu/bench/bench_doc_imbalance also checks the summary on made-up rows and the candidate
listing (the same code as bench_doc_ring_steps --list-candidates) on the CPU.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import doc_candidates_study
from doc_mixes import (MIXES, STDLIB_LENGTHS, magi_length, make_mix, read_lengths, run_ours, visible_pairs,
                       write_lengths)
from torch_timing import median_cuda_ms

def tflops(per_pair, d, heads, pairs, ms):
    return per_pair * d * heads * pairs / (ms * 1e-3) / 1e12 if ms and ms > 0 else float("nan")


def self_test(stdlib):
    """The CPU-side parts: every mix sums to N with positive lengths, is seeded, has the documented shape, and the
    pair count equals a brute-force count over positions. Raises AssertionError on the first failure."""
    for n in (16384, 65536, 131072):
        for name in MIXES:
            lengths = make_mix(name, n, 1, stdlib)
            assert sum(lengths) == n, (name, n, sum(lengths))
            assert all(length >= 1 for length in lengths), (name, n)
            assert lengths == make_mix(name, n, 1, stdlib), f"{name} at {n} is not deterministic for a seed"
            if name != "one":
                assert lengths != make_mix(name, n, 2, stdlib), f"{name} at {n} ignores the seed"
            body = lengths[:-1]  # the last document is cut at n
            if name == "short":
                assert all(1024 <= length <= 4096 for length in body), (name, n)
            if name == "short_long":
                assert all(1024 <= length <= 4096 or 8192 <= length <= 32768 for length in body), (name, n)
                if n >= 65536:
                    assert any(length >= 8192 for length in body) and any(length <= 4096 for length in body), n
            if name == "stdlib":
                assert all(length in set(stdlib) for length in body), n
            if name == "magi":
                assert all(length <= n // 4 for length in lengths), (name, n, max(lengths))
                allowed = set(magi_length(x, n) for x in stdlib)
                assert all(length in allowed for length in body), (name, n)
            # Brute force: position p of a document starting at s sees p - s + 1 keys.
            brute, p = 0, 0
            for length in lengths:
                for i in range(length):
                    brute += i + 1
                p += length
            assert brute == visible_pairs(lengths), (name, n)
            assert visible_pairs(lengths) <= n * (n + 1) // 2
    # magi carries the stdlib file's long tail: pooled over seeds, most tokens sit in documents of at least n/16
    # (a uniform short mix would put none there), and the clip at n/4 is reached.
    for n in (65536, 131072):
        pooled = [length for seed in range(1, 21) for length in make_mix("magi", n, seed, stdlib)]
        long_share = sum(length for length in pooled if length >= n // 16) / sum(pooled)
        assert long_share > 0.5, (n, long_share)
        assert max(pooled) == n // 4, (n, max(pooled))
    assert visible_pairs([4, 1, 3]) == 10 + 1 + 6
    assert make_mix("one", 1000, 5, stdlib) == [1000]
    print("doc_attention_side_by_side self-test: mixes and pair counts OK")


def cross_check_ours(binary, stdlib, cp=8):
    """bench_doc_ring_steps --plan-only (no GPU) reads each mix's length file and must count the same visible pairs
    (its ring_pair_counts over the ring order) as visible_pairs here."""
    with tempfile.TemporaryDirectory() as tmp:
        for n in (16384, 131072):
            for name in MIXES:
                lengths = make_mix(name, n, 1, stdlib)
                path = os.path.join(tmp, f"{name}_{n}.txt")
                write_lengths(path, lengths)
                run = subprocess.run([binary, "--lengths", path, "--cp", str(cp), "--plan-only"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                assert run.returncode == 0, run.stdout
                words = run.stdout.split()
                pairs = int(words[words.index("visible") - 1])
                assert pairs == visible_pairs(lengths), (name, n, pairs, visible_pairs(lengths), run.stdout)
                assert f"N {n}," in run.stdout and f"{len(lengths)} documents" in run.stdout, run.stdout
    print(f"doc_attention_side_by_side self-test: {os.path.basename(binary)} --plan-only counts the same pairs")
    cross_check_gather(binary, stdlib)
    cross_check_forms(binary, stdlib)
    doc_candidates_study.check_ours_candidates(binary)


# RingAttention's one-launch forms (parallel/cp/gather_list_form.h, tests/mpi/test_ring_gather_work_list.cpp) by
# RT_ATTN_WORK_LIST (None: unset): the lists by default and with 1, the two_kv calls with 0.
RING_ATTENTION_FORMS = {None: ("attn_fwd_work_list", "attn_bwd_work_list"), "1": ("attn_fwd_work_list",
                                                                                 "attn_bwd_work_list"),
                        "0": ("attn_fwd_whole_two_kv", "attn_bwd_block_fresh_two_kv")}


def cross_check_forms(binary, stdlib):
    """bench_doc_ring_steps --scheme gather --plan-only names the one-launch forward's and backward's kernels its paths
    hold (the "gather one-launch forms" line); they must be RingAttention's for each RT_ATTN_WORK_LIST, with or without
    --work-list / --bwd-work-list (which only add the side by side), and a value RingAttention refuses is refused."""
    def plan(path, value, extra=()):
        env = {k: v for k, v in os.environ.items() if k != "RT_ATTN_WORK_LIST"}
        if value is not None:
            env["RT_ATTN_WORK_LIST"] = value
        return subprocess.run([binary, "--lengths", path, "--cp", "8", "--scheme", "gather", "--plan-only", *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "short_16384.txt")
        write_lengths(path, make_mix("short", 16384, 1, stdlib))
        for value, (fwd, bwd) in RING_ATTENTION_FORMS.items():
            for extra in ((), ("--work-list", "--bwd-work-list")):
                run = plan(path, value, extra)
                assert run.returncode == 0, run.stdout
                line = next((x for x in run.stdout.splitlines() if x.startswith("gather one-launch forms")), None)
                assert line is not None, run.stdout
                got = (line.split("forward ")[1].split(",")[0], line.split("backward ")[1].split()[0].rstrip(","))
                assert got == (fwd, bwd), (value, extra, got, line)
                assert ("bwd work list plan" in run.stdout) == ("--bwd-work-list" in extra), run.stdout
        bad = plan(path, "2")
        assert bad.returncode != 0 and "RT_ATTN_WORK_LIST=2" in bad.stdout, bad.stdout
    print(f"doc_attention_side_by_side self-test: {os.path.basename(binary)} --plan-only names RingAttention's "
          "one-launch forms for RT_ATTN_WORK_LIST unset, 1 and 0")


def layout_owner(layout, n, cp):
    """Rank of every position under contiguous or zigzag (parallel/schedule/layout.h): a bytearray of n."""
    owner = bytearray(n)
    if layout == "contiguous":
        for r in range(cp):
            owner[r * (n // cp):(r + 1) * (n // cp)] = bytes([r]) * (n // cp)
    else:  # zigzag: chunks r and 2cp-1-r of 2cp chunks
        c = n // (2 * cp)
        for j in range(2 * cp):
            owner[j * c:(j + 1) * c] = bytes([j if j < cp else 2 * cp - 1 - j]) * c
    return owner


def gather_rows_brute(lengths, layout, cp):
    """Rows each rank receives under the gather scheme, from the definition: the positions held by other ranks in
    the union of [doc_start(q), q] over the rank's queries q. Over a run of one rank's positions within one document
    that union is [doc_start, the run's last q], so each run marks one interval; the count is over positions."""
    n = sum(lengths)
    owner = layout_owner(layout, n, cp)
    doc_of = bytearray(n)  # parity of the document index: enough to see where a document ends
    doc_start, p = [], 0
    for index, length in enumerate(lengths):
        doc_of[p:p + length] = bytes([index & 1]) * length
        doc_start += [p] * length
        p += length
    seen = [bytearray(n) for _ in range(cp)]
    for q in range(n):
        if q + 1 == n or owner[q + 1] != owner[q] or doc_of[q + 1] != doc_of[q]:  # q ends a run
            seen[owner[q]][doc_start[q]:q + 1] = b"\x01" * (q + 1 - doc_start[q])
    rows = []
    for r in range(cp):
        other = owner.translate(bytes(0 if value == r else 1 for value in range(256)))  # 1 where not rank r's
        rows.append(bin(int.from_bytes(seen[r], "big") & int.from_bytes(other, "big")).count("1"))
    return rows


def cross_check_gather(binary, stdlib):
    """bench_doc_ring_steps --scheme gather --plan-only (no GPU) at cp 4 and 8, GQA heads: its rows received per rank
    equal gather_rows_brute's, rows sent sum to the same total, and its bytes are those rows' K/V (bf16, twice: the
    forward's gather and the backward's) and dK/dV (f32) against the plain ring's (every block to every other rank)."""
    heads, kv_heads, d = 8, 2, 64
    kv_row, dkv_row = 2 * kv_heads * d * 2, 2 * kv_heads * d * 4
    with tempfile.TemporaryDirectory() as tmp:
        for n in (16384, 65536):
            for name in MIXES:
                lengths = make_mix(name, n, 1, stdlib)
                path = os.path.join(tmp, f"{name}_{n}.txt")
                write_lengths(path, lengths)
                for cp in (4, 8):
                    for layout in ("contiguous", "zigzag"):
                        cmd = [binary, "--lengths", path, "--cp", str(cp), "--layout", layout, "--scheme", "gather",
                               "--h", str(heads), "--kv-heads", str(kv_heads), "--d", str(d), "--plan-only"]
                        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                        assert run.returncode == 0, run.stdout
                        line = next(x for x in run.stdout.splitlines() if x.startswith("gather plan:"))
                        words = line.replace(";", " ").replace("(", " ").split()
                        got = [int(x) for x in words[words.index("rank") + 1].split(",")]
                        sent = [int(x) for x in words[len(words) - 1 - words[::-1].index("rank") + 1].split(",")]
                        want = gather_rows_brute(lengths, layout, cp)
                        what = (name, n, cp, layout)
                        assert got == want, (what, got, want)
                        assert sum(sent) == sum(want) and len(sent) == cp, (what, sent)
                        at = words.index("layer")
                        moved, ring = float(words[at + 1]), float(words[at + 5])
                        assert moved == sum(want) * (2 * kv_row + dkv_row), (what, moved)
                        assert ring == cp * (cp - 1) * (n // cp) * (2 * kv_row + dkv_row), (what, ring)
        # --scheme auto: the chooser's joint pick of layout and scheme, named in the sample line; a gather pick
        # comes with its plan, a ring pick without.
        path = os.path.join(tmp, "short_65536.txt")
        run = subprocess.run([binary, "--lengths", path, "--cp", "8", "--scheme", "auto", "--plan-only"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert run.returncode == 0, run.stdout
        sample = next(x for x in run.stdout.splitlines() if x.startswith("sample:"))
        assert "(auto:" in sample, sample
        assert ("(auto:gather:" in sample) == ("gather plan:" in run.stdout), run.stdout
    bad = subprocess.run([binary, "--lengths", STDLIB_LENGTHS, "--h", "8", "--kv-heads", "3", "--plan-only"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert bad.returncode == 2 and "kv-heads" in bad.stdout, bad.stdout
    bad = subprocess.run([binary, "--lengths", STDLIB_LENGTHS, "--scheme", "allgather", "--plan-only"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert bad.returncode == 2 and "ring, gather and auto" in bad.stdout, bad.stdout
    print(f"doc_attention_side_by_side self-test: {os.path.basename(binary)} --scheme gather --plan-only receives "
          "the rows a brute force finds, at cp 4 and 8")


def measure_ours(binary, lengths, args):
    with tempfile.TemporaryDirectory() as tmp:
        lengths_path = os.path.join(tmp, "lengths.txt")
        write_lengths(lengths_path, lengths)
        return run_ours(binary, lengths_path, args, ["--layout", args.layout, "--scheme", args.scheme])


def median_ms(torch, fn, warmup, reps):
    return median_cuda_ms(torch, fn, warmup, reps)


def fwd_bwd_ms(torch, fwd, inputs, dout, warmup, reps):
    """(fwd ms, bwd ms): bwd = median(fwd + backward) - median(fwd)."""
    def both():
        for t in inputs:
            t.grad = None
        fwd().backward(dout)
    t_fwd = median_ms(torch, fwd, warmup, reps)
    t_all = median_ms(torch, both, warmup, reps)
    return t_fwd, t_all - t_fwd


def measure_torch(lengths, args, skip):
    if {"fa4", "flex", "dense"} <= skip:  # nothing to measure: no PyTorch needed
        return {}
    import torch
    import torch.nn.functional as F
    n, heads, kv_heads, d = sum(lengths), args.heads, args.kv_heads, args.d
    gqa = kv_heads != heads  # K and V with kv_heads heads, each shared by heads / kv_heads query heads
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    rows = {}

    def randn(*shape, grad=True):
        t = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        return t.requires_grad_(grad)

    if "fa4" not in skip:
        try:
            from flash_attn.cute import flash_attn_varlen_func
            q, k, v = randn(n, heads, d), randn(n, kv_heads, d), randn(n, kv_heads, d)  # FA4 takes GQA as is
            dout = randn(n, heads, d, grad=False)
            cum = [0]
            for length in lengths:
                cum.append(cum[-1] + length)
            cu = torch.tensor(cum, dtype=torch.int32, device="cuda")
            longest = max(lengths)

            def fa4():
                r = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                                           max_seqlen_k=longest, causal=True)
                return r[0] if isinstance(r, tuple) else r
            rows["fa4"] = fwd_bwd_ms(torch, fa4, (q, k, v), dout, args.warmup, args.reps)
            del q, k, v, dout
        except Exception as e:  # ImportError without FA4 on this machine; anything else is reported
            rows["fa4"] = f"{type(e).__name__}: {str(e)[-200:]}"
    if "flex" not in skip:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            doc_id = torch.repeat_interleave(torch.arange(len(lengths), device="cuda"),
                                             torch.tensor(lengths, device="cuda"))

            def document_causal(b, h, q_idx, kv_idx):
                return (doc_id[q_idx] == doc_id[kv_idx]) & (q_idx >= kv_idx)
            try:  # compiled construction: never materialises the (N, N) mask (128K: 16 GiB of bools)
                block_mask = create_block_mask(document_causal, 1, 1, n, n, device="cuda", _compile=True)
            except TypeError:  # a PyTorch without _compile
                block_mask = create_block_mask(document_causal, 1, 1, n, n, device="cuda")
            flex = torch.compile(flex_attention)
            q, k, v = randn(1, heads, n, d), randn(1, kv_heads, n, d), randn(1, kv_heads, n, d)
            dout = randn(1, heads, n, d, grad=False)
            extra = {"enable_gqa": True} if gqa else {}
            rows["flex"] = fwd_bwd_ms(torch, lambda: flex(q, k, v, block_mask=block_mask, **extra), (q, k, v), dout,
                                      args.warmup, args.reps)
            del q, k, v, dout, block_mask
        except Exception as e:
            rows["flex"] = f"{type(e).__name__}: {str(e)[-200:]}"
    if "dense" not in skip:
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            groups = {}
            for length in lengths:
                groups[length] = groups.get(length, 0) + 1
            tensors = []  # per length: (count, H, L, d) q, k, v, dout
            for length, count in sorted(groups.items()):
                tensors.append([randn(count, heads, length, d), randn(count, kv_heads, length, d),
                                randn(count, kv_heads, length, d), randn(count, heads, length, d, grad=False)])
            extra = {"enable_gqa": True} if gqa else {}
            # Per length, the backend: cuDNN where it runs this shape (fwd and bwd), else FLASH; chosen before timing.
            backends = []
            for q, k, v, do in tensors:
                for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                    try:
                        with sdpa_kernel([backend]):
                            F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra).backward(do)
                        backends.append((name, backend))
                        break
                    except RuntimeError:
                        continue
                else:
                    raise RuntimeError(f"neither cuDNN nor FLASH SDPA runs causal length {q.shape[2]}")
            used = set(name for name, _ in backends)

            def dense_fwd():
                outs = []
                for (q, k, v, _), (_, backend) in zip(tensors, backends):
                    with sdpa_kernel([backend]):
                        outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True, **extra))
                return outs

            def dense_both():
                for (q, k, v, do), o in zip(tensors, dense_fwd()):
                    q.grad = k.grad = v.grad = None
                    o.backward(do)
            t_fwd = median_ms(torch, dense_fwd, args.warmup, args.reps)
            t_all = median_ms(torch, dense_both, args.warmup, args.reps)
            rows["dense"] = (t_fwd, t_all - t_fwd)
            rows["dense_backends"] = ",".join(sorted(used))
            rows["dense_calls"] = len(groups)
            del tensors
        except Exception as e:
            rows["dense"] = f"{type(e).__name__}: {str(e)[-200:]}"
    torch.cuda.empty_cache()
    return rows


def describe(name, n, lengths):
    pairs = visible_pairs(lengths)
    return (f"N {n:>7} {name:<10} {len(lengths):>5} docs, longest {max(lengths):>6}, visible pairs {pairs:.4g} "
            f"({pairs / (n * (n + 1) / 2):.3f} of causal)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="path of bench_doc_ring_steps (a CUDA build's build-gpu/bench/)")
    ap.add_argument("--n", default="16384,65536,131072")
    ap.add_argument("--mixes", default="stdlib,short,short_long")
    ap.add_argument("--lengths", default=STDLIB_LENGTHS, help="the length file of the stdlib mix")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16, help="query heads")
    ap.add_argument("--kv-heads", type=int, default=0, help="K/V heads (default: --heads; fewer is GQA)")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--cp", type=int, default=8)
    ap.add_argument("--layout", default="balanced")
    ap.add_argument("--scheme", default="ring", choices=("ring", "gather", "auto"),
                    help="ours: the ring's calls, or the gather scheme's (parallel/schedule/gather_plan.h)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--timing", default="queued", choices=("queued", "lone"),
                    help="bench_doc_ring_steps' per-call timing: queued (calls back to back, the host ahead: what a "
                         "training step's GPU sees) or lone (each call alone on an idle GPU, host enqueue included)")
    ap.add_argument("--doc-plans", default="step", choices=("step", "call"),
                    help="bench_doc_ring_steps' document set-up: made once per distinct call and reused, as a training "
                         "step does over its layers (step), or made by every call (call: before issue 46)")
    ap.add_argument("--skip", default="", help="comma list of contenders to leave out: fa4, flex, dense, ours")
    ap.add_argument("--jsonl", help="one JSON object per (N, mix)")
    ap.add_argument("--out", help="the markdown table")
    ap.add_argument("--dry-run", action="store_true", help="print the mixes and commands; no GPU")
    ap.add_argument("--self-test", action="store_true", help="check the mixes and pair counts; no GPU")
    ap.add_argument("--candidates", type=int, default=0, metavar="K",
                    help="per (N, mix): the chooser's pick and its K best-predicted other candidates, measured "
                         "(bench/doc_candidates_study.py); no FA4 / Flex / dense")
    ap.add_argument("--summarize", metavar="FILE", nargs="+", help="the --candidates tables from JSONL files; no GPU")
    ap.add_argument("--lister", help="with --self-test: bench_doc_imbalance, whose --list-candidates is checked")
    args = ap.parse_args()
    args.kv_heads = args.kv_heads or args.heads
    if args.kv_heads < 1 or args.heads % args.kv_heads:
        ap.error(f"--kv-heads {args.kv_heads} must divide --heads {args.heads}")
    stdlib = read_lengths(args.lengths)
    if args.self_test:
        self_test(stdlib)
        doc_candidates_study.self_test(args.lister)
        if args.ours:  # CPU too: the binary's --plan-only needs no GPU
            cross_check_ours(args.ours, stdlib)
        return 0
    if args.summarize:
        doc_candidates_study.summarize_file(args.summarize)
        return 0
    sizes = [int(x) for x in args.n.split(",")]
    mixes = [m for m in args.mixes.split(",") if m]
    skip = set(s for s in args.skip.split(",") if s)
    for n in sizes:
        if n % args.cp:
            ap.error(f"--n {n} is not a multiple of --cp {args.cp}")
    if args.dry_run:
        for n in sizes:
            for name in mixes:
                print(describe(name, n, make_mix(name, n, args.seed, stdlib)))
        return 0
    if "ours" not in skip and not (args.ours and os.path.exists(args.ours)):
        ap.error("--ours must name bench_doc_ring_steps (build it with a CUDA build: build-gpu/bench/), "
                 "or pass --skip ours")
    if args.candidates:
        if "ours" in skip:
            ap.error("--candidates measures bench_doc_ring_steps: leave ours in")
        samples = []
        with open(args.jsonl, "a") if args.jsonl else open(os.devnull, "w") as jsonl:
            for n in sizes:
                for name in mixes:
                    lengths = make_mix(name, n, args.seed, stdlib)
                    print("\n" + describe(name, n, lengths), flush=True)
                    samples += doc_candidates_study.study_sample(args.ours, lengths, n, name, args, jsonl)
        print("\n" + doc_candidates_study.summary_table(doc_candidates_study.summarize_rows(samples)))
        return 0

    header = ("| N | mix | docs | pairs / causal | ours fwd | ours bwd | FA4 fwd | FA4 bwd | Flex fwd | Flex bwd | "
              "dense fwd | dense bwd | ours / FA4 fwd | bwd | cp=%d ring: whole / sequence fwd | bwd | "
              "%s %s: whole / (cp x path) fwd | bwd | with comm fwd | bwd |" % (args.cp, args.scheme, args.layout))
    table = [header, "|" + "---|" * (header.count("|") - 1)]
    jsonl = open(args.jsonl, "a") if args.jsonl else None
    fmt = lambda x: f"{x:.0f}" if isinstance(x, float) and x == x else "–"
    for n in sizes:
        for name in mixes:
            lengths = make_mix(name, n, args.seed, stdlib)
            pairs = visible_pairs(lengths)
            print("\n" + describe(name, n, lengths), flush=True)
            ours = measure_ours(args.ours, lengths, args) if "ours" not in skip else {"error": "skipped"}
            peers = measure_torch(lengths, args, skip)
            rec = {"N": n, "mix": name, "seed": args.seed, "docs": len(lengths), "visible_pairs": pairs,
                   "d": args.d, "H": args.heads, "kv_heads": args.kv_heads, "cp": args.cp, "scheme": args.scheme,
                   "layout": args.layout, "ours": ours}
            tf = {}
            if "whole_fwd_ms" in ours:
                tf["ours"] = (tflops(4, args.d, args.heads, pairs, ours["whole_fwd_ms"]),
                              tflops(10, args.d, args.heads, pairs, ours["whole_bwd_ms"]))
            for peer in ("fa4", "flex", "dense"):
                value = peers.get(peer)
                if isinstance(value, tuple):
                    tf[peer] = (tflops(4, args.d, args.heads, pairs, value[0]),
                                tflops(10, args.d, args.heads, pairs, value[1]))
                    rec[peer] = {"fwd_ms": value[0], "bwd_ms": value[1], "fwd_tflops": tf[peer][0],
                                 "bwd_tflops": tf[peer][1]}
                elif value is not None:
                    rec[peer] = {"error": value}
            for key in ("dense_backends", "dense_calls"):
                if key in peers:
                    rec[key] = peers[key]
            for peer, (f, b) in tf.items():
                print(f"  {peer:<6} fwd {f:7.1f} TF/s  bwd {b:7.1f} TF/s (visible pairs)")
            forms = doc_candidates_study.one_launch_forms(ours)
            if forms:
                print(f"  ours one launch per rank fwd / bwd {forms} ({doc_candidates_study.FORMS_KEY})")
            for peer in ("fa4", "flex", "dense"):
                if isinstance(rec.get(peer), dict) and "error" in rec[peer]:
                    print(f"  {peer:<6} not measured: {rec[peer]['error']}")
            nan = float("nan")
            of, ob = tf.get("ours", (nan, nan))
            ff, fb = tf.get("fa4", (nan, nan))
            ring_f = ours["whole_fwd_ms"] / ours["ring_fwd_ms"] if "ring_fwd_ms" in ours else nan
            ring_b = ours["whole_bwd_ms"] / ours["ring_bwd_ms"] if "ring_bwd_ms" in ours else nan
            rec["ours_over_fa4"] = [of / ff, ob / fb] if ff == ff and of == of else None
            rec["ring_seq_over_whole"] = [ring_f, ring_b] if ring_f == ring_f else None
            eff = lambda key, d: (ours["whole_%s_ms" % d] / (args.cp * ours[key % d])
                                  if ours.get(key % d) else nan)  # the scheme's path against whole / cp
            path_f, path_b = eff("path_%s_ms", "fwd"), eff("path_%s_ms", "bwd")
            comm_f, comm_b = eff("path_comm_%s_ms", "fwd"), eff("path_comm_%s_ms", "bwd")
            rec["path_eff"] = [path_f, path_b] if path_f == path_f else None
            rec["path_comm_eff"] = [comm_f, comm_b] if comm_f == comm_f else None
            cells = [str(n), name, str(len(lengths)), f"{pairs / (n * (n + 1) / 2):.3f}"]
            for peer in ("ours", "fa4", "flex", "dense"):
                f, b = tf.get(peer, (nan, nan))
                cells += [fmt(f), fmt(b)]
            ratio = lambda x: f"{x:.2f}" if x == x else "–"
            cells += [ratio(of / ff), ratio(ob / fb), ratio(ring_f), ratio(ring_b), ratio(path_f), ratio(path_b),
                      ratio(comm_f), ratio(comm_b)]
            table.append("| " + " | ".join(cells) + " |")
            if jsonl:
                jsonl.write(json.dumps(rec) + "\n")
                jsonl.flush()
    if jsonl:
        jsonl.close()
    text = "\n".join(table)
    print("\nTFLOP/s on visible pairs (fwd 4*d, bwd 10*d per pair and head); ring: whole / sequence = the time of "
          "one whole call over the time of the cp=%d ring's calls in sequence (target >= 0.9); whole / (cp x path): "
          "the scheme's critical path, compute only and with the NVLink model's communication (issue 33's goal: "
          ">= 0.90 fwd, >= 0.92 bwd)\n" % args.cp + text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
