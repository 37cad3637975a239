#!/usr/bin/env python3
"""Side-by-side decode attention benchmark: ringtrain's split-KV kernel (bench_attn_decode) vs PyTorch SDPA with the
cuDNN backend and the flash (FA2) backend, at the same shapes, in the same job, on the same GPU.

Shapes (the decode anchor of the long-context issue): one new query per sequence, 32 query heads, 8 K/V heads
(SDPA's enable_gqa: K/V are not expanded), d 128, bf16; B 1 at KV lengths 32K, 64K, 128K, 512K, 1M and B 8 at 128K.
TB/s = bytes of K and V read per call (B * L * Hkv * d * 2 bytes * 2) / time. Median of --reps timed runs after
--warmup, CUDA events (bench/torch_timing.py). PyTorch's K/V are contiguous (B, Hkv, L, d), its usual layout.
A backend that refuses a shape gets '-' and its one-line error in the JSON rows.

Usage: python3 bench/decode_side_by_side.py [--ours build-gpu/bench/bench_attn_decode] [--out table.md]
       [--only 1:32768,8:131072] [--interleave] [--warmup 5] [--reps 20] [--sustain-ms MS]
Without --ours (or with a path that does not exist) only PyTorch runs: the script needs nothing but torch.
By default ours runs every shape in one process, then PyTorch does; --interleave runs each shape as ours then
PyTorch's two backends, back to back, so both see the same recent clock history.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from torch_timing import median_cuda_ms

H, HKV, D = 32, 8, 128
DEFAULT_SHAPES = [(1, 32768), (1, 65536), (1, 131072), (1, 524288), (1, 1048576), (8, 131072)]


def kv_bytes(batch, length):
    """Bytes of K and V read by one decode call."""
    return 2 * batch * length * HKV * D * 2


def parse_shapes(spec):
    shapes = []
    for item in spec.split(","):
        b, sep, l = item.partition(":")
        if not sep or not b.isdigit() or not l.isdigit() or int(b) <= 0 or int(l) <= 0:
            sys.exit(f"--only {spec!r}: expected B:L pairs such as 1:32768,8:131072")
        shapes.append((int(b), int(l)))
    return shapes


def measure_torch(shapes, warmup, reps, sustain_ms):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for batch, length in shapes:
        gen = torch.Generator(device="cuda").manual_seed(1234)
        q = torch.randn((batch, H, 1, D), device="cuda", dtype=torch.bfloat16, generator=gen)
        k, v = (torch.randn((batch, HKV, length, D), device="cuda", dtype=torch.bfloat16, generator=gen)
                for _ in range(2))
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            row = dict(backend=name, B=batch, L=length, H=H, Hkv=HKV, D=D)
            try:
                with sdpa_kernel([backend]):
                    ms = median_cuda_ms(torch, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                                        warmup, reps, sustain_ms)
                row.update(ms=ms, tbps=kv_bytes(batch, length) / (ms * 1e-3) / 1e12)
            except Exception as exc:  # a backend may refuse a shape
                row["error"] = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
            print(json.dumps(row), flush=True)
            rows.append(row)
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def torch_copy_tbps(warmup, reps):
    """Device-to-device copy of 2 GiB (bytes read + written), the ceiling a stream of loads is held against."""
    import torch
    src = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = median_cuda_ms(torch, lambda: dst.copy_(src), warmup, reps)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * (2 << 30) / (ms * 1e-3) / 1e12


def run_ours(path, shapes, args, ceilings):
    """{(B, L): row} and the ceiling row (or None) from one bench_attn_decode process."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        json_path = f.name
    only = ",".join(f"{b}:{l}" for b, l in shapes)
    cmd = [path, "--json", json_path, "--warmup", str(args.warmup), "--reps", str(args.reps), "--sustain-ms",
           str(args.sustain_ms), "--only", only] + ([] if ceilings else ["--no-ceilings"])
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    ours, ceiling = {}, None
    with open(json_path) as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "ceiling":
                ceiling = r
            else:
                ours[(r["B"], r["L"])] = r
    os.unlink(json_path)
    return ours, ceiling


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", help="path to bench_attn_decode (omit: PyTorch only)")
    ap.add_argument("--out", help="also write the markdown table here")
    ap.add_argument("--only", help="B:L pairs, default the anchor's six shapes")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sustain-ms", type=float, default=0.0,
                    help="run each op back to back this long before timing it, on both sides")
    ap.add_argument("--interleave", action="store_true", help="per shape: ours, then PyTorch's backends")
    args = ap.parse_args()
    shapes = parse_shapes(args.only) if args.only else DEFAULT_SHAPES
    ours_path = args.ours if args.ours and os.path.exists(args.ours) else None
    if args.ours and not ours_path:
        print(f"ours: {args.ours} does not exist (build it: ninja -C build-gpu bench_attn_decode); PyTorch only",
              flush=True)

    import torch
    if not torch.cuda.is_available():
        sys.exit("decode_side_by_side: PyTorch sees no CUDA device")
    ours, ceiling, torch_rows = {}, None, []
    if ours_path and args.interleave:
        for i, shape in enumerate(shapes):
            mine, c = run_ours(ours_path, [shape], args, ceilings=(i == 0))
            ours.update(mine)
            ceiling = ceiling or c
            torch_rows += measure_torch([shape], args.warmup, args.reps, args.sustain_ms)
    else:
        if ours_path:
            ours, ceiling = run_ours(ours_path, shapes, args, ceilings=True)
        torch_rows = measure_torch(shapes, args.warmup, args.reps, args.sustain_ms)
    theirs = {(r["backend"], r["B"], r["L"]): r for r in torch_rows}
    copy = torch_copy_tbps(args.warmup, args.reps)

    def tb(r):
        return r.get("tbps") if r else None

    def fmt(x):
        return "-" if x is None else f"{x:.2f}"

    def ratio(a, b):
        return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"

    lines = [f"GPU: {torch.cuda.get_device_name(0)}; PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}",
             f"Ceilings (same job): d2d copy {copy:.2f} TB/s (PyTorch)" +
             (f", {ceiling['copy_tbps']:.2f} TB/s (bench_attn_decode)" if ceiling else ""),
             "",
             f"Decode: one query per sequence, H {H}, Hkv {HKV}, d {D}, bf16. TB/s = K+V bytes / time. Order: " +
             ("per shape, ours then PyTorch" if args.interleave and ours_path else "ours for every shape, then PyTorch") +
             (f"; each op run back to back {args.sustain_ms:.0f} ms before timing" if args.sustain_ms else ""),
             ""]
    header = ["B", "KV length", "ours", "cuDNN", "FA2", "ours/cuDNN", "ours/FA2", "ours ms", "cuDNN ms"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for batch, length in shapes:
        mine = tb(ours.get((batch, length)))
        cud, fa2 = tb(theirs.get(("cudnn", batch, length))), tb(theirs.get(("flash", batch, length)))
        my_ms = ours.get((batch, length), {}).get("ms")
        cud_ms = theirs.get(("cudnn", batch, length), {}).get("ms")
        lines.append("| " + " | ".join([str(batch), (f"{length // 1024}K" if length % 1024 == 0 else str(length)), fmt(mine), fmt(cud), fmt(fa2),
                                        ratio(mine, cud), ratio(mine, fa2),
                                        "-" if my_ms is None else f"{my_ms:.4f}",
                                        "-" if cud_ms is None else f"{cud_ms:.4f}"]) + " |")
    errors = [f"{r['backend']} B {r['B']} L {r['L']}: {r['error']}" for r in torch_rows if "error" in r]
    if errors:
        lines += ["", "Refused:"] + [f"- {e}" for e in errors]
    table = "\n".join(lines)
    print("\n" + table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    sys.exit(main())
