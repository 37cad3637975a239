#!/usr/bin/env python3
"""Training step, ringtrain vs a PyTorch GPT of the same shape, side by side in one job on one GPU.

For each config (default: configs/bench/*.yaml) this runs `bench_train_step <config>` (ours, its own
process) and then PyTorch models of the same shape in this process, and prints one table with ratios.

The PyTorch side is what a PyTorch user would write (the way ../shared/baselines measured it): bf16 autocast over
fp32 weights, SDPA restricted to the cuDNN backend, fused AdamW, the full logits and F.cross_entropy, per-block
torch.utils.checkpoint when the config says checkpointing: full, and when it says selective, the same per-block
checkpoint with a selective policy that saves the SDPA op's outputs (O and LSE, as ours keeps them) and recomputes
everything else. Pre-norm RMSNorm, RoPE (rotate-half), the config's MLP (GELU (tanh), or SwiGLU as w2(silu(w1 x) *
w3 x)) and heads (grouped-query attention: the K/V heads repeated to the query heads before SDPA, as torchtitan's
Llama does), untied head, batch 1: the same FLOPs as ours. --set KEY=VALUE (repeatable) overrides a config key for
both sides: ours gets it as bench_train_step's --set, the PyTorch side reads the last part of the key (model.n_layer
-> n_layer), so the Llama-3-8B shape at 16K on one GPU is `--configs configs/llama3-8b-2m-8gpu.yaml --set
parallel.cp=1 --set parallel.zero=0 --set data.seq_len=16384 --set model.n_layer=12 --set train.checkpointing=none`. Contenders (each in its own try: one that fails, in compile or OOM, leaves the others):
  eager      that model in eager mode;
  compiled   (--torch-compile) the same with every block wrapped by torch.compile (default mode), the checkpoint
             wrapper (and its selective policy) applied before compile, as torchtitan orders them (apply_ac, then
             apply_compile); compile and warm-up steps are not timed (--compile-warmup, default 2);
  float8_tensorwise, float8_rowwise
             (--fp8, when torchao imports: ../shared/peers/torchao, a peer, never a dependency) the compiled model with
             every linear layer of a block (wqkv, wo, fc, proj; not the LM head, as ours) converted by torchao's
             convert_to_float8_training with that recipe before compile;
  fa4        (--torch-compile, when `flash_attn.cute` imports: FlashAttention-4, ../shared/peers/fa4) the compiled
             model with FA4 as its attention (B,T,H,d layout, no transposes). FA4 runs outside the compiled graphs
             (torch.compiler.disable: a graph break around it). Under selective checkpointing its block is
             checkpoint(pre-attention) -> FA4 (not checkpointed, so autograd keeps its inputs and output) ->
             checkpoint(post-attention): the same "keep the attention, recompute the rest" policy.

Packed documents (`--set data.documents=eot` with a bytes corpus, as bench/fp8_study.sh's docs part): ours runs
first and its RESULT line lists every step's document lengths (sample 0's); each PyTorch step i then runs on step i's
lengths (cycled), so both sides attend over the same documents: RoPE positions restart at each document, and the
attention is causal within each document only. The PyTorch attention for documents is --doc-attention: `flex`
(default; FlexAttention with a document block mask, compiled with the block, as torchtitan masks documents) or `fa4`
(FA4's flash_attn_varlen_func with cu_seqlens, outside the compiled graphs); the `fa4` contender always uses FA4.
Token ids are random on the PyTorch side (the speed does not depend on them). The eager contender and selective
checkpointing are refused with documents. MFU with documents counts 6*P_matmul*T + 12*L*d*pairs per step (ours'
formula), where pairs is the step's visible (query, key) pairs.

Ours: `ours` is bench_train_step in bf16; with --fp8 also `ours_fp8_<recipe>` (--precision fp8 --recipe <recipe>,
recipes from --fp8-recipes, default tensorwise rowwise block), each its own process; with --profile their log says the
quantization's share of the step. The table adds ours fp8 / ours bf16 and ours fp8 / the best torchao float8.

Both sides: ms/step is the median of the steps after warm-up, each step ended by a device sync; tok/s =
T / median; MFU = (6*P_matmul + 6*L*d*T) * tok/s / 989e12 (DESIGN.md; P_matmul excludes the embedding lookup).
Memory: ours = the arena (every model buffer) and the device's used memory (context and cuBLASLt workspace
included); torch = torch.cuda.max_memory_allocated.

    python3 bench/torch_gpt_side_by_side.py --ours build/bench/bench_train_step [--configs a.yaml b.yaml]
        [--warmup 1] [--steps 3] [--torch-compile] [--contenders ours eager compiled fa4] [--out table.md]
        [--json results.jsonl] [--skip-torch] [--profile] [--fp8 [--fp8-recipes tensorwise rowwise block]]
    torchao on the GPU machine: carry .torchao (../shared/peers/torchao/fetch.sh), then
        python3 -m pip install -q --no-deps --target /tmp/ao .torchao/*.whl && PYTHONPATH=/tmp/ao python3 bench/...
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


SHAPE_KEYS = {"n_layer", "d_model", "n_head", "n_kv_head", "vocab_size", "d_ff", "seq_len", "batch_size",
              "checkpointing", "mlp", "tied_embeddings"}


def apply_sets(shape, sets):
    """--set KEY=VALUE overrides on the PyTorch side's shape: the last part of the dotted key, where it is a shape key."""
    for kv in sets:
        key, eq, value = kv.partition("=")
        if not eq or not key:
            raise SystemExit(f"--set {kv}: expected KEY=VALUE (e.g. model.n_layer=12)")
        short = key.split(".")[-1]
        if short in SHAPE_KEYS:
            shape[short] = value
    return shape


def read_shape(path):
    """The few keys the PyTorch side needs, from the block-style YAML (no PyYAML needed)."""
    want = SHAPE_KEYS
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"^\s+(\w+):\s*([^#\s]+)", line)
            if m and m.group(1) in want and m.group(1) not in out:
                out[m.group(1)] = m.group(2)
    return out


def run_ours(binary, config, warmup, steps, timeout, profile=False, recipe=None, sets=()):
    """bench_train_step on one config; recipe: None (bf16) or an fp8.recipe (--precision fp8 --recipe recipe)."""
    cmd = [binary, config, "--warmup", str(warmup), "--steps", str(steps)] + (["--profile"] if profile else [])
    for kv in sets:
        cmd += ["--set", kv]
    cmd += ["--precision", "fp8", "--recipe", recipe] if recipe else ["--precision", "bf16"]
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


def have_fa4():
    try:
        from flash_attn.cute import flash_attn_func  # noqa: F401
        return True
    except Exception as e:  # ImportError, or a broken install
        print(f"fa4: flash_attn.cute does not import ({type(e).__name__}: {str(e)[:160]}); no FA4 column", flush=True)
        return False


def have_torchao():
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: F401
        return True
    except Exception as e:  # ImportError, or a torchao built for another torch
        print(f"torchao: torchao.float8 does not import ({type(e).__name__}: {str(e)[:160]}); no float8 columns "
              "(../shared/peers/torchao/README.md says how to install it on the GPU machine)", flush=True)
        return False


def document_arrays(lengths, device):
    """(positions (T,) int64: each token's position in its document, doc_ids (T,) int32, cu_seqlens (n + 1,) int32)
    for documents of these lengths, in order."""
    import torch
    lens = torch.tensor(lengths, dtype=torch.int64, device=device)
    starts = torch.cumsum(lens, 0) - lens  # (n) each document's first token
    doc_ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), lens)  # (T)
    positions = torch.arange(int(lens.sum()), device=device) - starts[doc_ids]  # (T)
    cu = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), torch.cumsum(lens, 0)]).to(torch.int32)
    return positions, doc_ids.to(torch.int32), cu


def run_torch(shape, warmup, steps, contender="eager", compile_warmup=2):
    """One PyTorch contender (eager | compiled | fa4 | float8_<recipe>) on one shape. Returns its numbers, or
    {"error": ...}."""
    import gc
    import torch
    t_start = time.perf_counter()
    try:
        return _run_torch(shape, warmup, steps, contender, compile_warmup)
    except Exception as e:  # compile errors, OOM, FA4 failures: this contender only
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
        print(f"  torch {contender}: FAILED after {time.perf_counter() - t_start:.0f} s: {msg}", flush=True)
        return {"error": "OOM" if isinstance(e, torch.OutOfMemoryError) else msg[:80]}
    finally:  # the model and optimizer died with _run_torch's frame
        gc.collect()
        if contender != "eager":
            import torch._dynamo
            torch._dynamo.reset()  # drop the compiled graphs (and their memory) before the next contender
        torch.cuda.empty_cache()


def _run_torch(shape, warmup, steps, contender, compile_warmup):
    import functools
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.checkpoint import checkpoint

    L, d, H = int(shape["n_layer"]), int(shape["d_model"]), int(shape["n_head"])
    V, T = int(shape["vocab_size"]), int(shape["seq_len"])
    ff = int(shape.get("d_ff", 4 * d))
    Hkv = int(shape.get("n_kv_head", H))
    swiglu = shape.get("mlp", "gelu") == "swiglu"
    if H % Hkv:
        raise SystemExit(f"n_head {H} is not a multiple of n_kv_head {Hkv}")
    policy = shape.get("checkpointing", "none")
    if policy not in ("none", "full", "selective"):
        raise SystemExit(f"checkpointing: {policy} is not one of none, full, selective")
    compiled = contender in ("compiled", "fa4") or contender.startswith("float8_")
    use_fa4 = contender == "fa4"
    doc_steps = shape.get("doc_lengths") or None  # packed documents: each step's lengths (ours' RESULT)
    doc_attention = ("fa4" if use_fa4 else shape.get("doc_attention", "flex")) if doc_steps else None
    if doc_steps:
        if not compiled:
            raise SystemExit("documents: the eager contender is not run (FlexAttention is only fast compiled)")
        if policy == "selective":
            raise SystemExit("documents: the PyTorch side has no selective checkpointing; set train.checkpointing "
                             "to full or none")
        if any(sum(l) != T for l in doc_steps):
            raise SystemExit(f"documents: a step's lengths do not sum to seq_len {T}")
        use_fa4 = doc_attention == "fa4"
    float8_recipe = contender[len("float8_"):] if contender.startswith("float8_") else None
    context_fn = None
    if policy == "selective":
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
        # Every SDPA backend's op (the sdpa_kernel context below picks cuDNN; the others are listed so the policy
        # still saves the attention if a build picks another).
        keep = {getattr(torch.ops.aten, n).default for n in (
            "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention") if hasattr(torch.ops.aten, n)}

        def keep_attention(ctx, op, *args, **kwargs):
            return CheckpointPolicy.MUST_SAVE if op in keep else CheckpointPolicy.PREFER_RECOMPUTE

        context_fn = functools.partial(create_selective_checkpoint_contexts, keep_attention)
    hd = d // H

    if use_fa4:
        from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

        # Documents: the step's (cu_seqlens (n + 1) i32, longest document), set before each step and read here, outside
        # the compiled graphs (passed through them, the int would make dynamo recompile for every new length).
        fa4_docs = [None]

        @torch.compiler.disable
        def fa4_attention(q, k, v):  # (B, T, H, hd) each
            docs = fa4_docs[0]
            if docs is None:
                r = flash_attn_func(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
                return r[0] if isinstance(r, tuple) else r
            cu, longest = docs  # batch 1: the packed (T, H, hd) rows
            r = flash_attn_varlen_func(q[0].contiguous(), k[0].contiguous(), v[0].contiguous(), cu_seqlens_q=cu,
                                       cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest, causal=True)
            return (r[0] if isinstance(r, tuple) else r).unsqueeze(0)
    if doc_attention == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.RMSNorm(d, eps=1e-5)
            self.wqkv = nn.Linear(d, (H + 2 * Hkv) * hd, bias=False)  # [q | k | v]
            self.wo = nn.Linear(d, d, bias=False)
            self.mlp_norm = nn.RMSNorm(d, eps=1e-5)
            self.fc = nn.Linear(d, 2 * ff if swiglu else ff, bias=False)  # SwiGLU: [w1 | w3]
            self.proj = nn.Linear(ff, d, bias=False)

        def pre(self, x, cos, sin):  # norm, qkv, RoPE: q, k, v in the attention's layout
            B, T_, _ = x.shape
            qkv = self.wqkv(self.attn_norm(x))
            q = qkv[..., : H * hd].view(B, T_, H, hd)
            k = qkv[..., H * hd: (H + Hkv) * hd].view(B, T_, Hkv, hd)
            v = qkv[..., (H + Hkv) * hd:].view(B, T_, Hkv, hd)
            if use_fa4:  # (B, T, H, hd)
                c, s_ = cos[:, None, :], sin[:, None, :]  # (T, 1, hd/2)
            else:
                q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
                c, s_ = cos, sin

            def rope(t):  # rotate-half: pairs (i, i + hd/2)
                t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
                return torch.cat((t1 * c - t2 * s_, t2 * c + t1 * s_), dim=-1)

            def repeat_kv(t):  # grouped-query attention: each K/V head repeated for its query heads
                return t if Hkv == H else t.repeat_interleave(H // Hkv, dim=2 if use_fa4 else 1)

            return rope(q), repeat_kv(rope(k)), repeat_kv(v)

        def attend(self, q, k, v, docs):  # -> (B, T, d); docs: the step's document mask (None: causal)
            if use_fa4:
                y = fa4_attention(q, k, v)  # (B, T, H, hd); documents: fa4_docs
                return y.reshape(y.shape[0], y.shape[1], d)
            if docs is not None:  # FlexAttention: docs is the step's BlockMask
                y = flex_attention(q, k, v, block_mask=docs)  # (B, H, T, hd)
            else:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hd)
            return y.transpose(1, 2).reshape(y.shape[0], y.shape[2], d)

        def post(self, x, y):  # out-projection, residual, MLP, residual
            x = x + self.wo(y)
            h = self.fc(self.mlp_norm(x))
            if swiglu:
                gate, up = h.chunk(2, dim=-1)
                return x + self.proj(F.silu(gate) * up)
            return x + self.proj(F.gelu(h, approximate="tanh"))

        def forward(self, x, cos, sin, docs=None):
            return self.post(x, self.attend(*self.pre(x, cos, sin), docs))

    class Checkpointed(nn.Module):
        """The block under per-block activation checkpointing (full, or selective through context_fn)."""

        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, x, cos, sin, docs=None):
            if context_fn is None:
                return checkpoint(self.block, x, cos, sin, docs, use_reentrant=False)
            return checkpoint(self.block, x, cos, sin, docs, use_reentrant=False, context_fn=context_fn)

    class KeepAttention(nn.Module):
        """Selective checkpointing around an attention the SAC policy cannot see (FA4): the parts before and after
        it are recomputed, the attention's inputs and output are kept."""

        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, x, cos, sin, docs=None):
            q, k, v = checkpoint(self.block.pre, x, cos, sin, use_reentrant=False)
            return checkpoint(self.block.post, x, self.block.attend(q, k, v, docs), use_reentrant=False)

    def wrap(block):  # checkpointing first, then compile (torchtitan's order)
        if policy == "selective" and use_fa4:
            block = KeepAttention(block)
        elif policy != "none":
            block = Checkpointed(block)
        return torch.compile(block) if compiled else block

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, d)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            if float8_recipe:  # the blocks' nn.Linear -> torchao Float8Linear, before checkpointing and compile
                from torchao.float8 import Float8LinearConfig, convert_to_float8_training
                convert_to_float8_training(self.blocks, config=Float8LinearConfig.from_recipe_name(float8_recipe))
            self.norm = nn.RMSNorm(d, eps=1e-5)
            self.head = nn.Linear(d, V, bias=False)
            self.run_blocks = [wrap(b) for b in self.blocks]  # not registered: the parameters stay in self.blocks

        def forward(self, idx, tgt, positions=None, docs=None):  # positions (T): RoPE's, restarting per document
            T_ = idx.shape[1]
            inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=idx.device).float() / hd))
            pos = positions if positions is not None else torch.arange(T_, device=idx.device)
            ang = torch.outer(pos.float(), inv)
            cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
            x = self.tok(idx)
            for b in self.run_blocks:
                x = b(x, cos, sin, docs)
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
    n_warm = max(warmup, compile_warmup) if compiled else warmup
    times, loss, first_s = [], float("nan"), None
    # Documents: per step of ours, (positions (T), doc ids (T), the attention's mask input, visible pairs).
    # FlexAttention: one mask function over one doc-id buffer that each step overwrites, so the compiled blocks see
    # the same function and tensor every step (a new closure per step would recompile them); each step's BlockMask is
    # built while the buffer holds that step's ids.
    step_inputs = []
    doc_ids_now = torch.zeros(T, dtype=torch.int32, device="cuda")  # (T) the running step's document ids

    def doc_causal(b, h, q_idx, kv_idx):
        return (doc_ids_now[q_idx] == doc_ids_now[kv_idx]) & (q_idx >= kv_idx)

    for lengths in doc_steps or []:
        positions, doc_ids, cu = document_arrays(lengths, "cuda")
        pairs = sum(n * (n + 1) // 2 for n in lengths)
        if doc_attention == "fa4":
            mask = (cu, max(lengths))
        else:
            doc_ids_now.copy_(doc_ids)
            mask = create_block_mask(doc_causal, None, None, T, T, device="cuda", _compile=True)  # not T x T in memory
        step_inputs.append((positions, doc_ids, mask, pairs))
    timed_flop = []  # documents: each timed step's FLOPs (6*P_matmul*T + 12*L*d*pairs)
    print(f"  torch {contender}: {L} blocks, ckpt {policy}{', compiling each block' if compiled else ''}; "
          f"{n_warm} warm-up + {steps} timed steps", flush=True)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for i in range(n_warm + steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if step_inputs:
                    # Timed step j runs on ours' timed step j's documents; warm-up steps on the lists in order.
                    w0 = int(shape.get("doc_warmup", 0))
                    j = w0 + (i - n_warm) if i >= n_warm else i
                    positions, doc_ids, mask, pairs = step_inputs[j % len(step_inputs)]
                    doc_ids_now.copy_(doc_ids)
                    if doc_attention == "fa4":
                        fa4_docs[0], mask = mask, None
                    l = model(idx, tgt, positions, mask)
                    if i >= n_warm:
                        timed_flop.append(6 * P_matmul * T + 12 * L * d * pairs)
                else:
                    l = model(idx, tgt)
            l.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            loss = l.item()
            if first_s is None:
                first_s = dt
            tag = " (warm-up" + (", compiles" if compiled and i == 0 else "") + ")" if i < n_warm else ""
            print(f"  torch {contender} step {i + 1}{tag}: {dt * 1e3:.1f} ms, loss {loss:.4f}", flush=True)
            if i >= n_warm:
                times.append(dt)
    times.sort()
    k = len(times)
    med = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
    step_flop = sum(timed_flop) / len(timed_flop) if timed_flop else flop_per_token * T
    return {"contender": contender, "ms_per_step": med * 1e3, "tok_s": T / med,
            "mfu": step_flop / med / (PEAK_TFLOPS * 1e12), "first_step_s": first_s,
            "attention": doc_attention or ("fa4" if use_fa4 else "sdpa-cudnn"),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
            "reserved_gib": torch.cuda.max_memory_reserved() / 2**30, "params": P, "flop_per_token": flop_per_token,
            "loss": loss, "steps": k, "warmup": n_warm, "raw_ms": [round(t * 1e3, 1) for t in times]}


def fmt(x, spec):
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def documents_wanted(sets):
    """Whether --set asks for packed documents (data.documents=eot)."""
    return any(kv.replace(" ", "") == "data.documents=eot" for kv in sets)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True, help="path to bench_train_step")
    ap.add_argument("--configs", nargs="*", default=None, help="default: configs/bench/*.yaml")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run of ours")
    ap.add_argument("--out", default=None, help="also write the table (markdown) here")
    ap.add_argument("--json", default=None, help="also append every contender's result (one JSON line each) here")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--torch-compile", action="store_true",
                    help="add the compiled PyTorch model (and, where flash_attn.cute imports, compiled + FA4)")
    ap.add_argument("--compile-warmup", type=int, default=2,
                    help="untimed steps for the compiled contenders (the first one compiles); at least --warmup")
    ap.add_argument("--contenders", nargs="*", default=None, choices=CONTENDERS,
                    help="run only these (default: ours eager, plus compiled fa4 with --torch-compile)")
    ap.add_argument("--profile", action="store_true", help="ours: one more step with per-op GPU times (in the log)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key on both sides (repeatable; see the top of this file)")
    ap.add_argument("--fp8", action="store_true",
                    help="add ours in fp8 (one per --fp8-recipes) and, when torchao imports, compiled + torchao float8 "
                         "(tensorwise, rowwise)")
    ap.add_argument("--doc-attention", choices=["flex", "fa4"], default="flex",
                    help="packed documents: the PyTorch side's attention (see the top of this file)")
    ap.add_argument("--fp8-recipes", nargs="*", default=["tensorwise", "rowwise", "block"],
                    choices=["tensorwise", "rowwise", "block"], help="ours' fp8.recipe values with --fp8")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    configs = a.configs or sorted(glob.glob(os.path.join(root, "configs", "bench", "*.yaml")))
    want = a.contenders or (["ours", "eager"] + (["compiled", "fa4"] if a.torch_compile else []))
    if a.fp8 and not a.contenders:
        want = (["ours"] + ["ours_fp8_" + r for r in a.fp8_recipes] + [c for c in want if c != "ours"] +
                ["compiled", "float8_tensorwise", "float8_rowwise"])
        want = list(dict.fromkeys(want))  # each once, in order
    have_torch = False
    gpu = "?"
    if not a.skip_torch and any(c != "ours" for c in want):
        try:
            import torch
            have_torch = torch.cuda.is_available()
            if have_torch:
                gpu = torch.cuda.get_device_name(0)
                print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {gpu}", flush=True)
            else:
                print("torch imports but sees no CUDA device: ours only", flush=True)
        except ImportError:
            print("torch not importable: ours only", flush=True)
    if "fa4" in want and have_torch and not have_fa4():
        want = [c for c in want if c != "fa4"]
    if any(c.startswith("float8_") for c in want) and have_torch and not have_torchao():
        want = [c for c in want if not c.startswith("float8_")]
    ours_cols = [c for c in want if c.startswith("ours")]
    torch_cols = [c for c in want if not c.startswith("ours")] if have_torch else []

    rows = []
    t_job = time.perf_counter()
    for n, c in enumerate(configs):
        shape = apply_sets(read_shape(c), a.set)
        res = {}
        for who in ours_cols + torch_cols:
            print(f"[{n + 1}/{len(configs)}] {os.path.basename(c)}: {who} "
                  f"(job at {time.perf_counter() - t_job:.0f} s)", flush=True)
            if who.startswith("ours"):
                recipe = who[len("ours_fp8_"):] if who.startswith("ours_fp8_") else None
                res[who] = run_ours(a.ours, c, a.warmup, a.steps, a.timeout, a.profile, recipe, a.set)
                if res[who].get("doc_lengths") and "doc_lengths" not in shape:  # packed documents: ours' steps
                    shape["doc_lengths"], shape["doc_attention"] = res[who]["doc_lengths"], a.doc_attention
                    shape["doc_warmup"] = a.warmup  # ours' first timed step's list
            elif documents_wanted(a.set) and "doc_lengths" not in shape:
                res[who] = {"error": "documents: no run of ours listed its document lengths"}
            else:
                res[who] = run_torch(shape, a.warmup, a.steps, who, a.compile_warmup)
            print(f"{who}: " + json.dumps({k: v for k, v in res[who].items() if k != "doc_lengths"}), flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps({"config": c, "contender": who, **res[who]}) + "\n")
        rows.append((c, shape, res))

    table = make_table(rows, ours_cols + torch_cols, gpu, a)
    print("\n" + table, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


CONTENDERS = ("ours", "ours_fp8_tensorwise", "ours_fp8_rowwise", "ours_fp8_block", "eager", "compiled", "fa4",
              "float8_tensorwise", "float8_rowwise")
LABEL = {"ours": "ours", "ours_fp8_tensorwise": "ours fp8 tensorwise", "ours_fp8_rowwise": "ours fp8 rowwise",
         "ours_fp8_block": "ours fp8 block", "eager": "torch eager", "compiled": "torch compiled",
         "fa4": "compiled+FA4", "float8_tensorwise": "compiled+float8 tensorwise",
         "float8_rowwise": "compiled+float8 rowwise"}


def make_table(rows, cols, gpu, a):
    """One row per config: ms/step, tok/s, MFU and memory of every contender, and ours / each PyTorch contender."""
    def cell(r, key, spec, scale=1.0, suffix=""):
        if key not in r:
            return r.get("error", "") if key == "ms_per_step" else ""
        return fmt(r[key] * scale, spec) + suffix

    torch_cols = [c for c in cols if not c.startswith("ours")]
    fp8_cols = [c for c in cols if c.startswith("ours_fp8_")]
    float8_cols = [c for c in torch_cols if c.startswith("float8_")]
    head = ["config", "L", "d", "T", "ckpt"]
    head += [f"{LABEL[c]} ms/step" for c in cols] + [f"{LABEL[c]} tok/s" for c in cols]
    head += [f"ours / {LABEL[c]}" for c in torch_cols if "ours" in cols]
    head += [f"{LABEL[c]} MFU" for c in cols]
    head += [f"{LABEL[c]} peak GiB" for c in torch_cols]
    if "ours" in cols:
        head += ["ours arena GiB", "ours device GiB", "ours host enqueue ms", "ours host waits"]
    head += [f"{LABEL[c]} / ours" for c in fp8_cols if "ours" in cols]
    head += [f"{LABEL[c]} arena GiB" for c in fp8_cols]
    head += [f"{LABEL[c]} quantization % (--profile)" for c in fp8_cols]
    if fp8_cols and float8_cols:
        head += ["best ours fp8 / best torchao float8"]
    lines = [f"GPU: {gpu}. MFU = (6*P_matmul + 6*L*d*T) * tok/s / {PEAK_TFLOPS:.0f} TFLOP/s. Median of {a.steps} "
             f"steps after {a.warmup} warm-up ({max(a.warmup, a.compile_warmup)} for the compiled contenders, whose "
             f"first step compiles). torch peak = max_memory_allocated.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c, s, res in rows:
        r = {k: res.get(k, {"error": "not run"}) for k in cols}
        cells = [os.path.basename(c), s.get("n_layer", ""), s.get("d_model", ""), s.get("seq_len", ""),
                 s.get("checkpointing", "")]
        cells += [cell(r[k], "ms_per_step", ".1f") for k in cols]
        cells += [cell(r[k], "tok_s", ".0f") for k in cols]
        if "ours" in cols:
            for k in torch_cols:
                ok = "tok_s" in r["ours"] and "tok_s" in r[k]
                cells.append(fmt(r["ours"]["tok_s"] / r[k]["tok_s"], ".2f") if ok else "")
        cells += [cell(r[k], "mfu", ".1f", 100.0, "%") for k in cols]
        cells += [cell(r[k], "peak_gib", ".1f") for k in torch_cols]
        if "ours" in cols:
            o = r["ours"]
            cells += [cell(o, "arena_gib", ".1f"), cell(o, "device_used_gib", ".1f"), cell(o, "enqueue_ms", ".1f"),
                      str(o.get("host_waits", ""))]
            for k in fp8_cols:  # the FP8 speed-up of ours
                ok = "tok_s" in r["ours"] and "tok_s" in r[k]
                cells.append(fmt(r[k]["tok_s"] / r["ours"]["tok_s"], ".2f") if ok else "")
        cells += [cell(r[k], "arena_gib", ".1f") for k in fp8_cols]
        for k in fp8_cols:
            q, w = r[k].get("fp8_quant_ms", -1), r[k].get("profile_wall_ms", -1)
            cells.append(fmt(100.0 * q / w, ".1f") if q is not None and q >= 0 and w and w > 0 else "")
        if fp8_cols and float8_cols:
            ours_best = max((r[k]["tok_s"] for k in fp8_cols if "tok_s" in r[k]), default=None)
            theirs_best = max((r[k]["tok_s"] for k in float8_cols if "tok_s" in r[k]), default=None)
            cells.append(fmt(ours_best / theirs_best, ".2f") if ours_best and theirs_best else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
