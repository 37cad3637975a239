#!/usr/bin/env python3
"""End-to-end generation, side by side in one job: `ringtrain generate` against transformers' `generate` (SDPA) on
the same weights, at long prompts: prefill seconds and decode tokens/s.

  python3 bench/generate_side_by_side.py --ringtrain build-gpu/ringtrain [--lengths 32768,131072]
      [--new-tokens 128] [--work DIR] [--out results.jsonl] [--md table.md] [--cp N --mpirun mpirun]
      [--cuda-graph auto|on|off|both] [--hbm-tb-s 4.8]
  python3 bench/generate_side_by_side.py --ringtrain build-cpu/ringtrain --self-test     (CPU, tiny, seconds)

What it does:
  1. A synthetic Llama model of the stated shape (random weights, bf16, written by hand as safetensors; default
     16 layers, d_model 2048, 16 query / 4 KV heads of head dim 128 (the GQA group of Llama 3 8B), d_ff 5632,
     vocab 32000: 0.86B parameters) -> `ringtrain import-hf` -> a ringtrain checkpoint -> `ringtrain export-hf
     --dtype bf16` -> the exported HF directory. The weights are bf16 values all the way, so both sides hold the
     same numbers.
  2. For each prompt length: a random prompt (ids in [3, vocab), seeded), then
     - ringtrain: `ringtrain generate` on the checkpoint (device cuda, or cpu in the self-test), greedy,
       --max-new-tokens N, --eos-id -1, --warmup (one untimed prefill of the same prompt first, as transformers
       gets a warm-up below; its seconds are the row's prefill_cold_s, in the table as "first prefill s");
       prefill_s (the prompt but its last token, on the configured grid) and
       decode_tokens_per_s (N steps, the first one runs the prompt's last token) from its JSON; --cuda-graph
       (default auto: one CUDA graph per decode step where supported) is passed through, and `both` runs
       ringtrain twice per length, `on` then `off` (rows "ringtrain graph on" and "ringtrain graph off"); each row
       records whether the graph ran (decode_cuda_graph) and the fraction of the decode's bandwidth bound reached:
       a step reads every weight but the embedding table (one row) and the whole KV cache once, so the bound is
       --hbm-tb-s (default 4.8, an H200's HBM3e) / (those bytes) tokens/s (bf16; fp32 in the self-test);
     - transformers: AutoModelForCausalLM.from_pretrained(exported, torch_dtype=bfloat16, attn_implementation="sdpa")
       on cuda; after a warm-up on a short prompt, prefill = the wall time of generate(max_new_tokens=1) (the whole
       prompt and one greedy token), decode = generate(max_new_tokens=N + 1, min_new_tokens=N + 1) minus that,
       over its N later tokens; CUDA synchronised around each call.
     Both greedy; the row records how many leading new ids agree (random weights: near-ties can split the two
     after a while; this is a sanity figure, not the correctness test, which is tests/hf/test_generate.py).
  3. One markdown table on stdout (and --md), one JSON object per (length, side) in --out (JSONL).

Failure: without torch, transformers or a CUDA device (full mode), or without the ringtrain binary, it stops
before building anything, exit 2 with one line naming what is missing. Every command has a --timeout.
--self-test: the tiny shape on CPU ranks (prompts of 40 and 100 tokens, 8 new tokens); transformers runs there in
fp32 on the CPU when it imports, else its rows are 'skipped'. It checks the rows and the missing-torch refusal;
needs only NumPy and the binary.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "hf"))
try:
    import numpy as np
    from hf_fixture import write_llmc_shard, write_safetensors
except ImportError as e:
    print(f"generate_side_by_side: NumPy is required ({e}); install python3-numpy", file=sys.stderr)
    sys.exit(2)

BENCH_SHAPE = dict(layers=16, hidden=2048, heads=16, kv_heads=4, ff=5632, vocab=32000)
TINY_SHAPE = dict(layers=2, hidden=64, heads=4, kv_heads=2, ff=96, vocab=300)
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


class BenchError(Exception):
    pass


def param_count(s):
    d = s["hidden"] // s["heads"]
    layer = s["hidden"] * d * (2 * s["heads"] + 2 * s["kv_heads"]) + 3 * s["hidden"] * s["ff"] + 2 * s["hidden"]
    return s["layers"] * layer + 2 * s["vocab"] * s["hidden"] + s["hidden"]


def write_synthetic_llama(path, s, max_positions, std, seed=0):
    """A LlamaForCausalLM directory of shape `s` with random bf16 weights (normal, `std`; norms 1)."""
    os.makedirs(path, exist_ok=True)
    d = s["hidden"] // s["heads"]
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s["hidden"],
              "intermediate_size": s["ff"], "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
              "num_key_value_heads": s["kv_heads"], "head_dim": d, "vocab_size": s["vocab"], "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": max_positions,
              "rope_theta": 500000.0, "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
              "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shapes = [("model.embed_tokens.weight", (s["vocab"], s["hidden"]))]
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", (s["hidden"],)),
                   (p + "self_attn.q_proj.weight", (s["heads"] * d, s["hidden"])),
                   (p + "self_attn.k_proj.weight", (s["kv_heads"] * d, s["hidden"])),
                   (p + "self_attn.v_proj.weight", (s["kv_heads"] * d, s["hidden"])),
                   (p + "self_attn.o_proj.weight", (s["hidden"], s["heads"] * d)),
                   (p + "post_attention_layernorm.weight", (s["hidden"],)),
                   (p + "mlp.gate_proj.weight", (s["ff"], s["hidden"])),
                   (p + "mlp.up_proj.weight", (s["ff"], s["hidden"])),
                   (p + "mlp.down_proj.weight", (s["hidden"], s["ff"]))]
    shapes += [("model.norm.weight", (s["hidden"],)), ("lm_head.weight", (s["vocab"], s["hidden"]))]
    rng = np.random.default_rng(seed)
    entries = []
    for name, shape in shapes:
        if name.endswith("norm.weight"):
            x = np.ones(shape, dtype=np.float32)
        else:
            x = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # (shape) bf16 bits, truncated: random values anyway
        entries.append((name, "BF16", bits, shape))
    write_safetensors(os.path.join(path, "model.safetensors"), entries, {"format": "pt"})
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)


def run(cmd, timeout, env=None, what=""):
    """Runs `cmd`; raises BenchError with its tail on failure or timeout (never hangs past `timeout`)."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout,
                           env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what or cmd[0]} ran past --timeout {timeout} s: {' '.join(cmd[:6])} ...")
    if p.returncode != 0:
        raise BenchError(f"{what or cmd[0]} failed (exit {p.returncode}): {' '.join(cmd[:6])} ...\n"
                         f"{p.stderr.strip()[-2000:]}")
    return p


def write_generate_config(path, work, device):
    data = os.path.join(work, "data.bin")
    if not os.path.exists(data):  # generate reads no data, but a config names a source
        write_llmc_shard(data, np.arange(4000) % 256)
    with open(path, "w") as f:
        f.write(f"device: {device}\ndata:\n  source: shards\n  path: {data}\n  seq_len: 64\n"
                f"train:\n  batch_size: 1\n  steps: 1\n  eval_every: 0\n  run_dir: {os.path.join(work, 'run')}\n"
                f"optim:\n  lr: 0.0\n  min_lr: 0.0\n  warmup_steps: 0\n")
    return path


def ringtrain_generate(a, cfg, ckpt, prompt_file, new, work, cuda_graph, extra=()):
    out = os.path.join(work, "ringtrain_out.json")
    cmd = [a.ringtrain, "generate", cfg, "--checkpoint", ckpt, "--prompt-ids", prompt_file,
           "--max-new-tokens", str(new), "--eos-id", "-1", "--out", out, "--overwrite",  # one file, each length
           "--cuda-graph", cuda_graph, "--warmup"] + list(extra)
    if a.cp > 1:
        cmd = [a.mpirun, "-np", str(a.cp)] + cmd + ["--set", f"parallel.cp={a.cp}"]
    p = run(cmd, a.timeout, env=MPI_ENV, what="ringtrain generate")
    with open(out) as f:
        r = json.load(f)
    startup = [ln for ln in p.stderr.splitlines() if "KV cache" in ln]
    decode_line = [ln for ln in p.stderr.splitlines() if ln.startswith("generate: decode ")]
    return r, (startup[0] if startup else ""), (decode_line[0] if decode_line else "")


def torch_side(exported, device, dtype_name):
    """-> a function (prompt, new) -> (prefill_s, decode_s, new ids), on a model loaded once."""
    import torch
    from transformers import AutoModelForCausalLM
    import transformers
    dtype = getattr(torch, dtype_name)
    version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
    dtype_kw = "dtype" if version >= (4, 56) else "torch_dtype"  # torch_dtype is deprecated from 4.56
    model = AutoModelForCausalLM.from_pretrained(exported, attn_implementation="sdpa", **{dtype_kw: dtype}).to(device)
    model.eval()
    model.generation_config.eos_token_id = None  # never stop early, as ringtrain runs with --eos-id -1

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def timed_generate(ids, n):
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0,
                                 attention_mask=torch.ones_like(ids))
        sync()
        return time.perf_counter() - t0, out[0, ids.shape[1]:].tolist()

    def measure(prompt, new):
        ids = torch.tensor([prompt], device=device)
        timed_generate(ids[:, : min(len(prompt), 1024)], 4)  # warm-up: kernels, allocator
        prefill_s, _ = timed_generate(ids, 1)
        total_s, new_ids = timed_generate(ids, new + 1)
        if device == "cuda":
            torch.cuda.empty_cache()
        return prefill_s, max(total_s - prefill_s, 1e-9), new_ids[:new]

    return measure


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def decode_bytes_per_token(s, kv_rows, elem_bytes):
    """Bytes one decode step must read at least: the weights but the embedding table (its one row), and the K / V
    cache of kv_rows rows of every layer."""
    d = s["hidden"] // s["heads"]
    weights = param_count(s) - s["vocab"] * s["hidden"] + s["hidden"]
    cache = 2 * s["layers"] * kv_rows * s["kv_heads"] * d
    return (weights + cache) * elem_bytes


def preflight(a):
    """Stops, exit 2 with one line, before any work when something the run needs is missing."""
    if not os.path.isfile(a.ringtrain) or not os.access(a.ringtrain, os.X_OK):
        raise SystemExit(f"generate_side_by_side: --ringtrain {a.ringtrain} is not an executable; build it first "
                         "(launch/build.sh, or cmake ... && ninja -C build-gpu ringtrain) and pass its path")
    if a.self_test:
        return
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"generate_side_by_side: torch and transformers are needed for the side by side ({e}); "
                         "install them (pip install torch transformers) or run --self-test for the CPU check")
    if not torch.cuda.is_available():
        raise SystemExit("generate_side_by_side: no CUDA device is visible to torch; run it on a GPU machine "
                         "(or --self-test for the CPU check)")


def parse_lengths(text):
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 2:
        raise SystemExit(f"generate_side_by_side: --lengths {text!r} must be prompt lengths >= 2, e.g. 32768,131072")
    return out


def bench(a):
    shape = dict(TINY_SHAPE if a.self_test else BENCH_SHAPE)
    for k in shape:
        if getattr(a, k) is not None:
            shape[k] = getattr(a, k)
    if shape["hidden"] % shape["heads"] or shape["heads"] % shape["kv_heads"]:
        raise SystemExit(f"generate_side_by_side: shape {shape}: hidden must split over heads and heads over kv_heads")
    lengths = parse_lengths(a.lengths)
    device = "cpu" if a.self_test else "cuda"
    work = a.work
    os.makedirs(work, exist_ok=True)
    print(f"shape {shape} ({param_count(shape) / 1e9:.3f}B parameters), head dim {shape['hidden'] // shape['heads']}; "
          f"work dir {work}", flush=True)

    t0 = time.perf_counter()
    hf = os.path.join(work, "synthetic_hf")
    # std 0.08 on the tiny shape keeps its greedy choices clear of fp32 near-ties (as tests/hf/hf_fixture.py does)
    write_synthetic_llama(hf, shape, max_positions=max(lengths) + a.new_tokens + 64, std=0.08 if a.self_test else 0.02)
    ckpt, exported = os.path.join(work, "ckpt"), os.path.join(work, "exported_hf")
    run([a.ringtrain, "import-hf", hf, "--out", ckpt, "--device", "cpu"], a.timeout, what="ringtrain import-hf")
    run([a.ringtrain, "export-hf", ckpt, "--out", exported, "--dtype", "bf16"], a.timeout, what="ringtrain export-hf")
    print(f"model written, imported and exported in {time.perf_counter() - t0:.1f} s", flush=True)
    cfg = write_generate_config(os.path.join(work, "generate.yaml"), work, device)

    measure, torch_note = None, ""
    try:
        measure = torch_side(exported, device, "float32" if a.self_test else "bfloat16")
    except ImportError as e:
        if not a.self_test:
            raise
        torch_note = f"skipped: torch / transformers not importable ({e})"

    rows = []
    for length in lengths:
        prompt = [int(t) for t in np.random.default_rng(length).integers(3, shape["vocab"], length)]
        prompt_file = os.path.join(work, f"prompt_{length}.json")
        with open(prompt_file, "w") as f:
            json.dump(prompt, f)
        common = dict(prompt_tokens=length, new_tokens=a.new_tokens, shape=shape, params=param_count(shape),
                      device=device, dtype="fp32" if a.self_test else "bf16")
        # the cache grows from length - 1 to length + new - 2 rows over the steps: its mean
        step_bytes = decode_bytes_per_token(shape, length + (a.new_tokens - 3) / 2, 4 if a.self_test else 2)
        bound = a.hbm_tb_s * 1e12 / step_bytes
        graph_runs = [("on", "ringtrain graph on"), ("off", "ringtrain graph off")] if a.cuda_graph == "both" \
            else [(a.cuda_graph, "ringtrain")]
        for setting, side in graph_runs:
            r, startup, decode_line = ringtrain_generate(a, cfg, ckpt, prompt_file, a.new_tokens, work, setting)
            ours = dict(common, side=side, prefill_s=r["prefill_s"], prefill_cold_s=r.get("prefill_warmup_s"),
                        decode_s=r["decode_s"],
                        decode_tokens_per_s=r["decode_tokens_per_s"], grid=r["grid"], new_ids=r["new_ids"],
                        startup=startup, cuda_graph=setting, decode_cuda_graph=r.get("decode_cuda_graph", False),
                        decode_graph_nodes=r.get("decode_graph_nodes", 0), decode_line=decode_line,
                        decode_graph_capture_s=r.get("decode_graph_capture_s", 0),
                        bytes_per_token=step_bytes, bound_tokens_per_s=bound,
                        bound_fraction=r["decode_tokens_per_s"] / bound)
            rows.append(ours)
            print(f"{side:<18} {length:>8} tokens: prefill {r['prefill_s']:.3f} s (the first, untimed: "
                  f"{r.get('prefill_warmup_s') or 0:.3f} s), decode "
                  f"{r['decode_tokens_per_s']:.1f} tokens/s ({100 * ours['bound_fraction']:.1f}% of the "
                  f"{bound:.0f} tokens/s bound at {a.hbm_tb_s} TB/s; graph "
                  f"{'ran' if ours['decode_cuda_graph'] else 'off'}, {ours['decode_graph_nodes']} nodes)", flush=True)
        if len(graph_runs) == 2:
            check_same = common_prefix(rows[-2]["new_ids"], rows[-1]["new_ids"])
            rows[-2]["ids_agree_no_graph"] = check_same
            print(f"graph vs no graph: first {check_same} of {a.new_tokens} greedy ids agree", flush=True)
        if a.profile:  # one more run, ungraphed with CUDA events around every op: where a token's time goes
            r, _, _ = ringtrain_generate(a, cfg, ckpt, prompt_file, a.new_tokens, work, "off", extra=["--profile"])
            ops = sorted(r.get("decode_profile_ms", {}).items(), key=lambda kv: -kv[1])
            total = sum(ms for _, ms in ops)
            print(f"ringtrain --profile {length} tokens: decode ops {1e3 * total / a.new_tokens:.1f} us of GPU time "
                  f"per token (ungraphed, events around each op; the bound is {1e6 / bound:.1f} us):", flush=True)
            for name, ms in ops[:12]:
                print(f"    {name:<28} {1e3 * ms / a.new_tokens:9.1f} us per token {100 * ms / max(total, 1e-9):6.1f}%",
                      flush=True)
            pre = sorted(r.get("prefill_profile_ms", {}).items(), key=lambda kv: -kv[1])[:8]
            print("  prefill ops: " + ", ".join(f"{n} {ms:.1f} ms" for n, ms in pre), flush=True)
            rows.append(dict(common, side="profile (ringtrain --profile, not a timing row)", profile_only=True,
                             decode_profile_ms=r.get("decode_profile_ms", {}),
                             prefill_profile_ms=r.get("prefill_profile_ms", {})))
        if measure is None:
            rows.append(dict(common, side="transformers", skipped=torch_note))
            continue
        prefill_s, decode_s, ids = measure(prompt, a.new_tokens)
        rows.append(dict(common, side="transformers", prefill_s=prefill_s, decode_s=decode_s,
                         decode_tokens_per_s=a.new_tokens / decode_s, new_ids=ids,
                         ids_agree=common_prefix(ids, ours["new_ids"])))
        print(f"transformers {length:>8} tokens: prefill {prefill_s:.3f} s, decode {a.new_tokens / decode_s:.1f} "
              f"tokens/s; first {rows[-1]['ids_agree']} of {a.new_tokens} greedy ids agree", flush=True)
    return rows


def markdown(rows):
    lines = ["| prompt | side | prefill s | first prefill s | prefill tokens/s | decode tokens/s | "
             "% of bandwidth bound | greedy ids agree |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("profile_only"):
            continue
        if "skipped" in r:
            lines.append(f"| {r['prompt_tokens']} | {r['side']} | - | - | - | - | - | {r['skipped']} |")
            continue
        agree = f"{r['ids_agree']} / {r['new_tokens']}" if "ids_agree" in r else ""
        if "ids_agree_no_graph" in r:
            agree = f"{r['ids_agree_no_graph']} / {r['new_tokens']} with no graph"
        bound = f"{100 * r['bound_fraction']:.1f}" if "bound_fraction" in r else ""
        cold = f"{r['prefill_cold_s']:.3f}" if r.get("prefill_cold_s") is not None else ""
        lines.append(f"| {r['prompt_tokens']} | {r['side']} | {r['prefill_s']:.3f} | {cold} | "
                     f"{r['prompt_tokens'] / max(r['prefill_s'], 1e-9):.0f} | {r['decode_tokens_per_s']:.1f} | "
                     f"{bound} | {agree} |")
    return "\n".join(lines)


def write_outputs(a, rows):
    table = markdown(rows)
    print(table)
    if a.md:
        with open(a.md, "w") as f:
            f.write(table + "\n")
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        os.replace(tmp, a.out)
        print(f"wrote {a.out}")


def self_test(a):
    """The tiny run's rows must be complete and plausible; the full mode must refuse clearly without torch."""
    failures = []

    def check(cond, what):
        print(("ok    " if cond else "FAIL  ") + what, flush=True)
        if not cond:
            failures.append(what)

    rows = bench(a)
    write_outputs(a, rows)
    ours = [r for r in rows if r["side"].startswith("ringtrain")]
    per_length = 2 if a.cuda_graph == "both" else 1
    check([r["prompt_tokens"] for r in ours] == [n for n in parse_lengths(a.lengths) for _ in range(per_length)],
          f"{per_length} ringtrain row(s) per prompt length")
    check(all(not r["decode_cuda_graph"] and "ungraphed" in r["decode_line"] for r in ours),
          "CPU ranks decode ungraphed under --cuda-graph " + a.cuda_graph + ", and the start-up line says so")
    check(all(0 < r["bound_fraction"] for r in ours), "each ringtrain row has its fraction of the bandwidth bound")
    if per_length == 2:
        check(all(r.get("ids_agree_no_graph") == a.new_tokens for r in ours if r["side"] == "ringtrain graph on"),
              "--cuda-graph on and off generate the same ids")
    check(all(len(r["new_ids"]) == a.new_tokens and r["prefill_s"] > 0 and r["decode_tokens_per_s"] > 0
              for r in ours), f"each generated {a.new_tokens} ids with a prefill time and a decode rate")
    check(all((r.get("prefill_cold_s") or 0) > 0 for r in ours), "--warmup: each row has its untimed first prefill")
    check(all("KV cache" in r["startup"] for r in ours), "generate's start-up line names the KV cache it allocates")
    theirs = [r for r in rows if r["side"] == "transformers"]
    check(len(theirs) * per_length == len(ours), "a transformers row (measured or skipped) per prompt length")
    for r in theirs:
        if "skipped" not in r:  # fp32 on the CPU: the greedy ids must agree (tests/hf/test_generate.py's claim)
            check(r["ids_agree"] == a.new_tokens, f"transformers fp32 CPU ids agree at {r['prompt_tokens']} tokens")
    # Full mode where torch does not import: one line, exit 2, before any model is written.
    with tempfile.TemporaryDirectory() as stub:
        os.makedirs(os.path.join(stub, "torch"))
        with open(os.path.join(stub, "torch", "__init__.py"), "w") as f:
            f.write("raise ImportError('torch stub of the self-test')\n")
        work = os.path.join(stub, "work")
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--ringtrain", a.ringtrain, "--work", work],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=stub))
        check(p.returncode == 2 and "torch and transformers are needed" in p.stderr and not os.path.exists(work)
              and time.perf_counter() - t0 < 60,
              f"without torch: exit {p.returncode}, nothing built: {p.stderr.strip()[-200:]}")
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ringtrain", default="build-gpu/ringtrain")
    ap.add_argument("--lengths", default=None, help="prompt lengths (default 32768,131072; self-test 40,100)")
    ap.add_argument("--new-tokens", type=int, default=None, help="greedy new tokens (default 128; self-test 8)")
    ap.add_argument("--work", default="", help="directory for the model, checkpoint and prompts, kept (default: a "
                                               "temporary one, removed at the end)")
    ap.add_argument("--out", default="", help="JSONL of the rows")
    ap.add_argument("--md", default="", help="the markdown table")
    ap.add_argument("--cp", type=int, default=1, help="ringtrain's cp ranks (mpirun -np CP; one GPU each)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--timeout", type=int, default=900, help="seconds any one command may take")
    ap.add_argument("--self-test", action="store_true", help="tiny shape on CPU ranks; checks the rows")
    ap.add_argument("--cuda-graph", default="auto", choices=["auto", "on", "off", "both"],
                    help="ringtrain generate --cuda-graph (default auto); both: a row with on and one with off")
    ap.add_argument("--profile", action="store_true",
                    help="one more ringtrain run per length with generate --profile (ungraphed, CUDA events around "
                         "each op): the decode's GPU time per op and token, and the prefill's, printed and in the JSONL")
    ap.add_argument("--hbm-tb-s", dest="hbm_tb_s", type=float, default=4.8,
                    help="the GPU's memory bandwidth in TB/s, for the decode's bound (default 4.8: an H200)")
    for k in BENCH_SHAPE:
        ap.add_argument("--" + k.replace("_", "-"), dest=k, type=int, default=None,
                        help=f"model shape (default {BENCH_SHAPE[k]}; self-test {TINY_SHAPE[k]})")
    a = ap.parse_args()
    a.lengths = a.lengths or ("40,100" if a.self_test else "32768,131072")
    a.new_tokens = a.new_tokens if a.new_tokens is not None else (8 if a.self_test else 128)
    if a.new_tokens < 1 or a.cp < 1:
        raise SystemExit("generate_side_by_side: --new-tokens and --cp must be >= 1")
    try:
        preflight(a)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    keep = bool(a.work)
    a.work = a.work or tempfile.mkdtemp(prefix="gen_side_by_side_")
    try:
        if a.self_test:
            return self_test(a)
        write_outputs(a, bench(a))
        return 0
    except BenchError as e:
        print(f"generate_side_by_side: {e}", file=sys.stderr)
        return 1
    finally:
        if not keep:  # the model, checkpoint and prompts (GBs at the bench shape); --work DIR keeps them
            shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
