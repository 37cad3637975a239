#!/usr/bin/env python3
"""Training step, ringtrain vs a PyTorch GPT of the same shape, side by side in one job on one GPU.

For each config (default: configs/bench/*.yaml) this runs `bench_train_step <config>` (ours, its own
process) and then a PyTorch model of the same shape in this process, and prints one table with ratios.

The PyTorch side is what a PyTorch user would write (the way ../shared/baselines measured it): eager mode,
bf16 autocast over fp32 weights, SDPA restricted to the cuDNN backend, fused AdamW, the full logits and
F.cross_entropy, per-block torch.utils.checkpoint when the config says checkpointing: full, and when it says
selective, the same per-block checkpoint with a selective policy that saves the cuDNN attention op's outputs
(O and LSE, as ours keeps them) and recomputes everything else. Pre-norm RMSNorm,
RoPE (rotate-half), GELU (tanh) MLP 4d, untied head, vocab 50304, batch 1: the same FLOPs as ours.

Both sides: ms/step is the median of the steps after warm-up, each step ended by a device sync; tok/s =
T / median; MFU = (6*P_matmul + 6*L*d*T) * tok/s / 989e12 (DESIGN.md; P_matmul excludes the embedding lookup).
Memory: ours = the arena (every model buffer) and the device's used memory (context and cuBLASLt workspace
included); torch = torch.cuda.max_memory_allocated (and reserved).

    python3 bench/torch_gpt_side_by_side.py --ours build/bench/bench_train_step [--configs a.yaml b.yaml]
        [--warmup 1] [--steps 3] [--out table.md] [--skip-torch] [--profile]
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import time

PEAK_TFLOPS = 989.0


def read_shape(path):
    """The few keys the PyTorch side needs, from the block-style YAML (no PyYAML needed)."""
    want = {"n_layer", "d_model", "n_head", "vocab_size", "d_ff", "seq_len", "batch_size", "checkpointing", "mlp",
            "tied_embeddings"}
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^\s+(\w+):\s*([^#\s]+)", line)
            if m and m.group(1) in want and m.group(1) not in out:
                out[m.group(1)] = m.group(2)
    return out


def run_ours(binary, config, warmup, steps, timeout, profile=False):
    cmd = [binary, config, "--warmup", str(warmup), "--steps", str(steps)] + (["--profile"] if profile else [])
    print("$ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        print(f"ours: timed out after {timeout} s", flush=True)
        return {"error": "timeout"}
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    sys.stdout.flush()
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}


def run_torch(shape, warmup, steps):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.checkpoint import checkpoint

    L, d, H = int(shape["n_layer"]), int(shape["d_model"]), int(shape["n_head"])
    V, T = int(shape["vocab_size"]), int(shape["seq_len"])
    ff = int(shape.get("d_ff", 4 * d))
    policy = shape.get("checkpointing", "none")
    if policy not in ("none", "full", "selective"):
        raise SystemExit(f"checkpointing: {policy} is not one of none, full, selective")
    ckpt = policy in ("full", "selective")
    context_fn = None
    if policy == "selective":
        import functools
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
        keep = {torch.ops.aten._scaled_dot_product_cudnn_attention.default}

        def keep_attention(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

        context_fn = functools.partial(create_selective_checkpoint_contexts, keep_attention)
    hd = d // H

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.RMSNorm(d, eps=1e-5)
            self.wqkv = nn.Linear(d, 3 * d, bias=False)
            self.wo = nn.Linear(d, d, bias=False)
            self.mlp_norm = nn.RMSNorm(d, eps=1e-5)
            self.fc = nn.Linear(d, ff, bias=False)
            self.proj = nn.Linear(ff, d, bias=False)

        def forward(self, x, cos, sin):
            B, T_, _ = x.shape
            q, k, v = self.wqkv(self.attn_norm(x)).view(B, T_, 3, H, hd).permute(2, 0, 3, 1, 4)

            def rope(t):  # rotate-half: pairs (i, i + hd/2)
                t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
                return torch.cat((t1 * cos - t2 * sin, t2 * cos + t1 * sin), dim=-1)

            y = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
            x = x + self.wo(y.transpose(1, 2).reshape(B, T_, d))
            return x + self.proj(F.gelu(self.fc(self.mlp_norm(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, d)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.norm = nn.RMSNorm(d, eps=1e-5)
            self.head = nn.Linear(d, V, bias=False)

        def forward(self, idx, tgt):
            T_ = idx.shape[1]
            inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=idx.device).float() / hd))
            ang = torch.outer(torch.arange(T_, device=idx.device).float(), inv)
            cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
            x = self.tok(idx)
            for b in self.blocks:
                if not ckpt:
                    x = b(x, cos, sin)
                elif context_fn is None:
                    x = checkpoint(b, x, cos, sin, use_reentrant=False)
                else:
                    x = checkpoint(b, x, cos, sin, use_reentrant=False, context_fn=context_fn)
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialise on the GPU (seconds less than on the host at 1.4B)
        model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    P = sum(p.numel() for p in model.parameters())
    P_matmul = P - model.tok.weight.numel()
    flop_per_token = 6 * P_matmul + 6 * L * d * T
    idx = torch.randint(0, V, (1, T), device="cuda")
    tgt = torch.randint(0, V, (1, T), device="cuda")
    times, loss = [], float("nan")
    try:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            for i in range(warmup + steps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    l = model(idx, tgt)
                l.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                loss = l.item()
                print(f"  torch step {i + 1}{' (warm-up)' if i < warmup else ''}: {dt * 1e3:.1f} ms, loss {loss:.4f}",
                      flush=True)
                if i >= warmup:
                    times.append(dt)
    except torch.OutOfMemoryError:
        del model, opt
        torch.cuda.empty_cache()
        return {"error": "OOM"}
    times.sort()
    k = len(times)
    med = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
    r = {"ms_per_step": med * 1e3, "tok_s": T / med, "mfu": flop_per_token * T / med / (PEAK_TFLOPS * 1e12),
         "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
         "reserved_gib": torch.cuda.max_memory_reserved() / 2**30, "params": P, "flop_per_token": flop_per_token,
         "loss": loss}
    del model, opt
    torch.cuda.empty_cache()
    return r


def fmt(x, spec):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True, help="path to bench_train_step")
    ap.add_argument("--configs", nargs="*", default=None, help="default: configs/bench/*.yaml")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run of ours")
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--profile", action="store_true", help="ours: one more step with per-op GPU times (in the log)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    configs = a.configs or sorted(glob.glob(os.path.join(root, "configs", "bench", "*.yaml")))
    have_torch = False
    gpu = "?"
    if not a.skip_torch:
        try:
            import torch
            have_torch = torch.cuda.is_available()
            if have_torch:
                gpu = torch.cuda.get_device_name(0)
                print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {gpu}", flush=True)
        except ImportError:
            print("torch not importable: ours only", flush=True)

    rows = []
    for c in configs:
        shape = read_shape(c)
        ours = run_ours(a.ours, c, a.warmup, a.steps, a.timeout, a.profile)
        theirs = run_torch(shape, a.warmup, a.steps) if have_torch else {"error": "no torch"}
        print("torch: " + json.dumps(theirs), flush=True)
        rows.append((c, shape, ours, theirs))

    head = ("| config | L | d | T | ckpt | ours ms/step | torch ms/step | ours tok/s | torch tok/s | ours/torch "
            "| ours MFU | torch MFU | ours arena GiB | ours device GiB | torch peak GiB | ours host enqueue ms | ours host waits |")
    lines = [f"GPU: {gpu}. MFU = (6*P_matmul + 6*L*d*T) * tok/s / {PEAK_TFLOPS:.0f} TFLOP/s. "
             f"Median of {a.steps} steps after {a.warmup} warm-up.", "", head,
             "|" + "---|" * (head.count("|") - 1)]
    for c, s, o, t in rows:
        ratio = o["tok_s"] / t["tok_s"] if "tok_s" in o and "tok_s" in t else None
        lines.append("| " + " | ".join([
            os.path.basename(c), s.get("n_layer", ""), s.get("d_model", ""), s.get("seq_len", ""),
            s.get("checkpointing", ""),
            fmt(o.get("ms_per_step"), ".1f") or o.get("error", ""), fmt(t.get("ms_per_step"), ".1f") or t.get("error", ""),
            fmt(o.get("tok_s"), ".0f"), fmt(t.get("tok_s"), ".0f"), fmt(ratio, ".2f"),
            fmt(100 * o["mfu"], ".1f") + "%" if "mfu" in o else "", fmt(100 * t["mfu"], ".1f") + "%" if "mfu" in t else "",
            fmt(o.get("arena_gib"), ".1f"), fmt(o.get("device_used_gib"), ".1f"), fmt(t.get("peak_gib"), ".1f"),
            fmt(o.get("enqueue_ms"), ".1f"), str(o.get("host_waits", ""))]) + " |")
    table = "\n".join(lines)
    print("\n" + table, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
