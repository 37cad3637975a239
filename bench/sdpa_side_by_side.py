#!/usr/bin/env python3
"""Side-by-side attention benchmark: ringtrain's CUDA flash kernels vs PyTorch SDPA (cuDNN and FLASH
backends) and, when `flash_attn.cute` imports, FlashAttention-4 (its flash_attn_func; ../shared/peers/fa4), on the
same grid, in the same job, on the same GPU.

Grid: d in {64,128}, N in {1K,4K,16K,64K}, causal and not, bf16, model dim 2048 (H = 2048/d),
B*N = 32K tokens (B = 1 for N >= 32K). FLOPs: forward 4*B*H*N^2*d (half when causal), backward 2.5x
forward. Median of 10 timed runs after 3 warm-ups, CUDA events. PyTorch's backward time is
(forward+backward) - forward, as usual for SDPA benchmarks; FA4's likewise. FA4 compiles its kernels (CuTe DSL) on
the first call of each shape and mask: that call (forward + backward) runs before the warm-ups and is not timed;
its wall time is reported as fa4_first_call_s. FA4 reads (B, N, H, d) tensors; it gets its own contiguous copies.
Without FA4 the table has no FA4 columns, and one line says why.

Usage: python3 bench/sdpa_side_by_side.py --ours build-gpu/bench/bench_attention [--out table.md]
       [--variant NAME:VAR=VALUE,VAR=VALUE ...]   (ours once per variant, environment set; one table each)
       [--dims 64,128] [--interleave [--lengths 4096,16384,65536]] [--sustain-ms MS] [--no-fa4]

By default ours runs the whole grid in one process, then PyTorch runs it. Under sustained load an H200 caps its
power (700 W) and lowers its clock by up to a quarter, by an amount that depends on what ran in the last
seconds, so a cell's number depends on the cells before it. --interleave runs each (d, N) cell as ours then
PyTorch's two backends, back to back, so that both see the same recent history. --sustain-ms runs every op
(ours and PyTorch's) back to back for that long before timing it, so that both are timed at the clock of
sustained load, as in training.
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile

from torch_timing import median_cuda_ms


def fa4_unavailable_reason():
    """None when FlashAttention-4 (flash_attn.cute) imports, else why not (one line)."""
    try:
        from flash_attn.cute import flash_attn_func  # noqa: F401
        return None
    except Exception as e:  # ImportError, or a broken install
        return f"flash_attn.cute does not import ({type(e).__name__}: {str(e)[:160]})"


def fa4_calls(flash_attn_func, q, k, v, do, causal):
    """FA4's forward and forward+backward on (B, N, H, d) copies of q, k, v, do (B, H, N, d); the copies are
    leaves of their own graph, so the SDPA backends' tensors are not touched."""
    q4, k4, v4 = (t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v))
    do4 = do.transpose(1, 2).contiguous()

    def fwd():
        r = flash_attn_func(q4, k4, v4, causal=causal)
        return r[0] if isinstance(r, tuple) else r  # (out, lse) in some versions

    def fwd_bwd():
        fwd().backward(do4)

    return fwd, fwd_bwd


def measure_torch(d_list, n_list, warmup, reps, sustain_ms=0.0, use_fa4=False):
    import time
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def median_ms(fn):
        return median_cuda_ms(torch, fn, warmup, reps, sustain_ms)

    rows = []
    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
    if use_fa4:
        from flash_attn.cute import flash_attn_func
        backends.append(("fa4", None))
    for d in d_list:
        heads = 2048 // d
        for n in n_list:
            batch = 1 if n >= 32768 else 32768 // n
            for causal in (False, True):
                gen = torch.Generator(device="cuda").manual_seed(1234)
                shape = (batch, heads, n, d)
                q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
                for t in (q, k, v):
                    t.requires_grad_(True)
                flops = 4.0 * batch * heads * n * n * d * (0.5 if causal else 1.0)
                for name, backend in backends:
                    row = dict(backend=name, d=d, N=n, B=batch, H=heads, causal=causal)
                    try:
                        if name == "fa4":
                            fwd, fwd_bwd = fa4_calls(flash_attn_func, q, k, v, do, causal)
                            first = time.perf_counter()  # compiles forward and backward: not timed
                            fwd_bwd()
                            torch.cuda.synchronize()
                            row["fa4_first_call_s"] = round(time.perf_counter() - first, 1)
                            context = contextlib.nullcontext()
                        else:
                            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                            def fwd_bwd():
                                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                                o.backward(do)

                            context = sdpa_kernel([backend])
                        with context:
                            t_fwd = median_ms(fwd)
                            t_all = median_ms(fwd_bwd)
                        t_bwd = t_all - t_fwd
                        row.update(fwd_ms=t_fwd, bwd_ms=t_bwd, fwd_tflops=flops / t_fwd / 1e9,
                                   bwd_tflops=2.5 * flops / t_bwd / 1e9)
                    except Exception as exc:  # a backend may refuse a shape
                        row["error"] = str(exc).splitlines()[0][:100]
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                del q, k, v, do
                torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True, help="path to bench_attention")
    ap.add_argument("--out", help="also write the markdown table here")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--dims", default="64,128", help="head dims of the grid")
    ap.add_argument("--lengths", default=None,
                    help="sequence lengths of the grid (default 1024,4096,16384,65536); needs --interleave")
    ap.add_argument("--interleave", action="store_true",
                    help="per (d, N) cell: ours, then PyTorch (cuDNN, FA2, FA4 where it imports; one variant only)")
    ap.add_argument("--sustain-ms", type=float, default=0.0,
                    help="run each op back to back this long before timing it, on both sides (sustained-load clocks)")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:VAR=VALUE,VAR=VALUE; ours runs once per variant (default: one run, 'default')")
    ap.add_argument("--no-fa4", action="store_true", help="leave FlashAttention-4 out even where it imports")
    args = ap.parse_args()
    fa4_missing = "left out (--no-fa4)" if args.no_fa4 else fa4_unavailable_reason()
    if fa4_missing:
        print(f"fa4: {fa4_missing}; no FA4 columns", flush=True)
    use_fa4 = fa4_missing is None

    variants = []
    for spec in args.variant or ["default:"]:
        name, _, env_spec = spec.partition(":")
        env = dict(kv.split("=", 1) for kv in env_spec.split(",") if kv)
        variants.append((name, env))
    dims = [int(x) for x in args.dims.split(",")]
    lengths = [1024, 4096, 16384, 65536]
    if args.lengths is not None:
        if not args.interleave:
            sys.exit("--lengths needs --interleave: without it ours runs bench_attention's whole grid in one process")
        try:
            lengths = [int(x) for x in args.lengths.split(",")]
        except ValueError:
            sys.exit(f"--lengths {args.lengths!r}: expected comma-separated integers, such as 4096,16384,65536")
    if args.interleave and len(variants) > 1:
        sys.exit("--interleave takes one variant")
    ours_by_variant, ceilings = {}, None

    def run_ours(name, env, extra):
        nonlocal ceilings
        with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
            ours_json = f.name
        cmd = [args.ours, "--json", ours_json, "--warmup", str(args.warmup), "--reps", str(args.reps),
               "--sustain-ms", str(args.sustain_ms)] + extra
        print(f"running [{name}] {env}:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, env={**os.environ, **env})
        ours = {}
        for line in open(ours_json):
            r = json.loads(line)
            if r["kind"] == "ceiling":
                ceilings = r
            elif r["d"] in dims:
                ours[(r["d"], r["N"], r["causal"])] = r
        os.unlink(ours_json)
        return ours

    if args.interleave:
        name, env = variants[0]
        ours, torch_rows = {}, []
        for d in dims:
            for n in lengths:
                ours.update(run_ours(name, env, ["--no-ceilings", "--d", str(d), "--n", str(n)]))
                torch_rows += measure_torch([d], [n], args.warmup, args.reps, args.sustain_ms, use_fa4)
        ours_by_variant[name] = (env, ours)
    else:
        for i, (name, env) in enumerate(variants):
            extra = (["--no-ceilings"] if i > 0 else []) + (["--d", str(dims[0])] if len(dims) == 1 else [])
            ours_by_variant[name] = (env, run_ours(name, env, extra))
        torch_rows = measure_torch(dims, lengths, args.warmup, args.reps, args.sustain_ms, use_fa4)
    theirs = {(r["backend"], r["d"], r["N"], r["causal"]): r for r in torch_rows}

    import torch
    lines = []
    lines.append(f"GPU: {torch.cuda.get_device_name(0)}; PyTorch {torch.__version__}, cuDNN "
                 f"{torch.backends.cudnn.version()}")
    if ceilings:
        lines.append(f"Ceilings (same job): d2d copy {ceilings['copy_tbps']:.2f} TB/s; bf16 gemm 8192^3 "
                     f"{ceilings['gemm_bf16_tflops']:.0f} TFLOP/s")
    lines.append("")
    lines.append("TFLOP/s (fwd 4BHN^2d, /2 causal; bwd 2.5x). ratio = ours / theirs. Order: " +
                 ("per (d, N) cell, ours then PyTorch's backends" + (" then FA4" if use_fa4 else "") +
                  " (--interleave)" if args.interleave
                  else "ours for the whole grid, then PyTorch for the whole grid") +
                 (f"; each op run back to back for {args.sustain_ms:.0f} ms before it is timed" if args.sustain_ms else ""))
    if use_fa4:
        first_calls = [r["fa4_first_call_s"] for r in torch_rows if "fa4_first_call_s" in r]
        lines.append(f"FA4 = flash_attn.cute.flash_attn_func; its first call per shape and mask (compile, "
                     f"{min(first_calls, default=0):.1f}-{max(first_calls, default=0):.1f} s) ran before the "
                     f"warm-ups, untimed")
    else:
        lines.append(f"FA4: {fa4_missing}; no FA4 columns")

    def tf(r, key):
        return r.get(key) if r and key in r else None

    def fmt(x):
        return "-" if x is None else f"{x:.0f}"

    def ratio(a, b):
        return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"

    peers = [("cudnn", "cuDNN"), ("flash", "FA2")] + ([("fa4", "FA4")] if use_fa4 else [])
    for name, (env, ours) in ours_by_variant.items():
        lines.append("")
        lines.append(f"ours = [{name}] {env or ''}")
        lines.append("")
        header = ["d", "N", "B", "causal"]
        for phase in ("fwd", "bwd"):
            header += [f"ours {phase}"] + [f"{label} {phase}" for _, label in peers]
            header += [f"{phase}/{label}" for _, label in peers]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for (d, n, causal), r in sorted(ours.items()):
            cells = [str(d), str(n), str(r["B"]), "yes" if causal else "no"]
            for phase in ("fwd", "bwd"):
                mine = tf(r, f"{phase}_tflops")
                theirs_tf = [tf(theirs.get((key, d, n, causal)), f"{phase}_tflops") for key, _ in peers]
                cells += [fmt(mine)] + [fmt(x) for x in theirs_tf] + [ratio(mine, x) for x in theirs_tf]
            lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print("\n" + table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    sys.exit(main())
