#!/usr/bin/env python3
"""`ringtrain generate` on the Hugging Face fixture (tests/hf/hf_fixture.py), CPU ranks, NumPy only.

  test_generate.py --ringtrain build/ringtrain [--mpirun mpirun] CASE

CASE:
  reference     fixture -> import-hf -> export-hf --dtype fp32; greedy ids of `ringtrain generate` (one CPU rank)
                equal a NumPy greedy generate on the exported weights that re-runs the whole forward per token
                (no cache), for 40 new tokens, on GQA + llama3 scaling (untied) and MHA (tied); a one-token prompt
                (no prefill) too
  grids         cp 2, cp 4, cp 4 with cp_a2a 2, tp 2 and cp 2 x tp 2 (mpirun) give the same ids as cp 1
  consistency   generating from the prompt extended by the first k generated ids continues with the same ids
                (the prefill's cache and positions against the decode's), on cp 1 and cp 2; seeded sampling
                repeats, and another seed changes it
  refusals      an empty prompt, an id outside the vocabulary, a prompt past the trained length (refused naming
                the limit), and one the RoPE scaling covers (runs with a warning)
  plan          `ringtrain plan --generate-context P --json` counts the KV cache generate allocates: its cache bytes
                equal generate's start-up line on cp 1 and cp 2 (and cp 2 x tp 2), the K / V part equals 2 L rows
                (Hkv / tp) D x 4 bytes (f32 on CPU) with the rows cp shards; generate refuses up front, naming the
                numbers, when --device-memory-gib is below them
  chunks        the prefill in chunks (--prefill-chunk N, and auto under a memory limit) against the one-pass
                prefill on the same grid (and the NumPy reference on cp 1): greedy ids equal and every step's logits
                (--dump-logits) within 1e-5 relative, fp32 CPU, for chunks that do not divide the prompt, chunks of
                one token and two chunks, on cp 1, cp 2, cp 4 (ranks holding no prompt row of a chunk), cp 4 with
                cp_a2a 2, tp 2 and cp 2 x tp 2 (mpirun); auto picks the fewest chunks that fit --device-memory-gib
                (one chunk fewer does not fit), says so at start-up, and `ringtrain plan` plans the same chunks and
                cache; with --cuda, also bf16 on the GPU against the one pass (chunks_cuda)
  transformers  (only where torch and transformers import; else exit 77 = skipped) transformers' greedy `generate`
                on the exported model: fp32 CPU ids equal for 40 new tokens; with --cuda, also a bf16 export on the
                GPU against transformers' bf16 for 16 tokens (equal, or diverging only where transformers' own
                top-2 logits are within 2^-6 of the top logit's magnitude)
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import hf_fixture as fx
except ImportError as e:
    print(f"test_generate: NumPy is required ({e}); install python3-numpy", file=sys.stderr)
    sys.exit(1)

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
failures = []
PROMPT = [int(t) for t in np.random.default_rng(3).integers(3, fx.VOCAB, 37)]  # no EOS (2) inside
NEW = 40


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(cmd, expect_ok=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, **MPI_ENV))
    if expect_ok and p.returncode != 0:
        print(p.stdout, p.stderr)
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}")
    return p


def write_config(path, tmp, device="cpu", extra=""):
    data = os.path.join(tmp, "data.bin")
    if not os.path.exists(data):
        fx.write_llmc_shard(data, np.random.default_rng(7).integers(0, fx.VOCAB, 4000))
    with open(path, "w") as f:
        f.write(f"""device: {device}
data:
  source: shards
  path: {data}
  seq_len: 96
train:
  batch_size: 1
  steps: 1
  eval_every: 0
  run_dir: {os.path.join(tmp, "run")}
optim:
  lr: 0.0
  min_lr: 0.0
  warmup_steps: 0
{extra}""")
    return path


def fixture(tmp, name, seed=5):
    """-> (checkpoint dir, exported fp32 HF dir, fp64 weights by HF name as exported)."""
    hf = os.path.join(tmp, "hf_" + name)
    fx.write_model_dir(hf, name, seed=seed)
    ckpt = os.path.join(tmp, "ckpt_" + name)
    run([args.ringtrain, "import-hf", hf, "--out", ckpt, "--device", "cpu"])
    exported = os.path.join(tmp, "export_" + name)
    run([args.ringtrain, "export-hf", ckpt, "--out", exported, "--dtype", "fp32"])
    return ckpt, exported, fx.read_weights_f64(exported)


def generate(cfg, ckpt, prompt, new=NEW, np_=1, sets=(), extra=()):
    cmd = [args.ringtrain, "generate", cfg, "--checkpoint", ckpt, "--prompt", ",".join(map(str, prompt)),
           "--max-new-tokens", str(new)] + list(extra)
    for s in sets:
        cmd += ["--set", s]
    if np_ > 1:
        cmd = [args.mpirun, "-np", str(np_)] + cmd
    p = run(cmd)
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def case_reference(tmp):
    cfg = write_config(os.path.join(tmp, "gen.yaml"), tmp)
    for name in ("gqa_llama3", "tied_mha"):
        ckpt, _, weights = fixture(tmp, name)
        out, err = generate(cfg, ckpt, PROMPT)
        ref, margin = fx.greedy_generate(name, weights, PROMPT, NEW, eos=2)
        check(out["new_ids"] == ref, f"reference {name}: {len(ref)} greedy ids equal the NumPy full re-forward "
                                     f"(smallest top-2 gap {margin:.3g})")
        check(out["stop"] == ("eos" if ref and ref[-1] == 2 else "max_new_tokens") and out["eos_id"] == 2,
              f"reference {name}: stop '{out['stop']}', EOS id {out['eos_id']} from the HF config")
        check("tokens/s" in err and "prefill" in err, f"reference {name}: prefill time and decode tokens/s reported")
        one, _ = generate(cfg, ckpt, PROMPT[:1], new=12)
        ref1, _ = fx.greedy_generate(name, weights, PROMPT[:1], 12, eos=2)
        check(one["new_ids"] == ref1, f"reference {name}: a one-token prompt (no prefill) matches")


def case_grids(tmp):
    cfg = write_config(os.path.join(tmp, "gen.yaml"), tmp)
    ckpt, _, _ = fixture(tmp, "gqa_llama3")
    base, _ = generate(cfg, ckpt, PROMPT)
    check(len(base["new_ids"]) > 0, f"grids: cp 1 generates {len(base['new_ids'])} ids")
    # --cuda-graph on is accepted on CPU ranks, which decode ungraphed and say so once (the graphed path: tests/gpu)
    on, err = generate(cfg, ckpt, PROMPT, extra=["--cuda-graph", "on"])
    line = "generate: decode ungraphed (--cuda-graph on): CUDA graphs need a CUDA device"
    check(on["new_ids"] == base["new_ids"] and on["decode_cuda_graph"] is False and err.count(line) == 1
          and base["decode_cuda_graph"] is False, f"grids: --cuda-graph on on the CPU decodes ungraphed, same ids: "
                                                   f"{[ln for ln in err.splitlines() if 'decode ' in ln][:1]}")
    # --profile: the same ids, both profiles in the JSON (empty on CPU ranks: no CUDA op to time), the tables on stderr
    prof, err = generate(cfg, ckpt, PROMPT, extra=["--profile"])
    check(prof["new_ids"] == base["new_ids"] and prof.get("decode_profile_ms") == {} and
          prof.get("prefill_profile_ms") == {} and "generate --profile: decode" in err and
          "decode_profile_ms" not in base, f"grids: --profile on the CPU: same ids, empty profiles: "
                                           f"{[ln for ln in err.splitlines() if '--profile' in ln][:2]}")
    # --warmup: an untimed prefill first, then the timed one into the emptied cache: the same ids, both times reported
    warm, _ = generate(cfg, ckpt, PROMPT, extra=["--warmup"])
    check(warm["new_ids"] == base["new_ids"] and (warm.get("prefill_warmup_s") or 0) > 0 and warm["prefill_s"] > 0
          and base.get("prefill_warmup_s", 0) is None,
          f"grids: --warmup: same ids, prefill_warmup_s {warm.get('prefill_warmup_s')} (none without it: "
          f"{base.get('prefill_warmup_s', 'absent')})")
    grids = [(2, ["parallel.cp=2"]), (4, ["parallel.cp=4"]), (4, ["parallel.cp=4", "parallel.cp_a2a=2"]),
             (2, ["parallel.tp=2"]), (4, ["parallel.cp=2", "parallel.tp=2"])]
    for np_, sets in grids:
        out, _ = generate(cfg, ckpt, PROMPT, np_=np_, sets=sets)
        want = {"cp": 1, "cp_a2a": 1, "tp": 1}
        for kv in sets:
            want[kv.split("=")[0].split(".")[1]] = int(kv.split("=")[1])
        check(out["grid"] == want and out["new_ids"] == base["new_ids"],
              f"grids: {' '.join(sets)} (ran on {out['grid']}) gives cp 1's ids")


def case_consistency(tmp):
    cfg = write_config(os.path.join(tmp, "gen.yaml"), tmp)
    ckpt, _, _ = fixture(tmp, "gqa_llama3")
    for np_, sets in ((1, []), (2, ["parallel.cp=2"])):
        full, _ = generate(cfg, ckpt, PROMPT, new=24, np_=np_, sets=sets, extra=["--eos-id", "-1"])
        ids = full["new_ids"]
        for k in (1, 6, 13):
            more, _ = generate(cfg, ckpt, PROMPT + ids[:k], new=24 - k, np_=np_, sets=sets, extra=["--eos-id", "-1"])
            check(more["new_ids"] == ids[k:], f"consistency {' '.join(sets) or 'cp=1'}: prompt + {k} generated ids "
                                              f"continues with the same {24 - k}")
    s1, _ = generate(cfg, ckpt, PROMPT, new=20, extra=["--temperature", "1.0", "--top-k", "50", "--seed", "11",
                                                       "--eos-id", "-1"])
    s2, _ = generate(cfg, ckpt, PROMPT, new=20, np_=2, sets=["parallel.cp=2"],
                     extra=["--temperature", "1.0", "--top-k", "50", "--seed", "11", "--eos-id", "-1"])
    s3, _ = generate(cfg, ckpt, PROMPT, new=20, extra=["--temperature", "1.0", "--top-p", "0.9", "--seed", "12",
                                                       "--eos-id", "-1"])
    check(s1["new_ids"] == s2["new_ids"], "sampling: one seed gives the same ids on cp 1 and cp 2")
    check(s1["new_ids"] != s3["new_ids"], "sampling: another seed and top-p give other ids")


def case_refusals(tmp):
    cfg = write_config(os.path.join(tmp, "gen.yaml"), tmp)
    ckpt, _, _ = fixture(tmp, "gqa_llama3")
    base = [args.ringtrain, "generate", cfg, "--checkpoint", ckpt, "--max-new-tokens", "4"]
    p = run(base + ["--prompt", ""], expect_ok=False)
    check(p.returncode == 2 and "prompt is empty" in p.stderr, f"refusals: empty prompt, exit {p.returncode}: "
                                                               f"{p.stderr.strip()[-160:]}")
    p = run(base + ["--prompt", f"1,{fx.VOCAB}"], expect_ok=False)
    check(p.returncode == 2 and f"vocabulary of {fx.VOCAB}" in p.stderr, f"refusals: id {fx.VOCAB}, exit "
                                                                         f"{p.returncode}")
    p = run(base + ["--prompt", "1,2", "--cuda-graph", "yes"], expect_ok=False)
    check(p.returncode == 2 and "--cuda-graph 'yes' is not a setting" in p.stderr and "--cuda-graph auto" in p.stderr,
          f"refusals: --cuda-graph yes, exit {p.returncode}: {p.stderr.strip()[-200:]}")
    p = run(base + ["--prompt", "1,2", "--cuda-graph", "on", "--profile"], expect_ok=False)
    check(p.returncode == 2 and "--profile" in p.stderr and "--cuda-graph off" in p.stderr,
          f"refusals: --profile with --cuda-graph on, exit {p.returncode}: {p.stderr.strip()[-200:]}")
    long_prompt = ",".join(["5"] * (fx.MAX_POS + 1))
    p = run(base + ["--prompt", long_prompt], expect_ok=False)
    check(p.returncode == 2 and f"trained at a context of {fx.MAX_POS}" in p.stderr and
          p.stderr.count("error") == 1, f"refusals: {fx.MAX_POS + 1} tokens past the trained {fx.MAX_POS}: "
                                        f"{p.stderr.strip()[-200:]}")
    # A checkpoint trained at 96 tokens from the llama3 fixture (scaling covers 64 x 4 = 256): 120 tokens run with
    # a warning.
    train_cfg = write_config(os.path.join(tmp, "train.yaml"), tmp,
                             extra="checkpoint:\n  save_final: true\n")
    run([args.ringtrain, "train", train_cfg, "--set", "train.init_from=" + ckpt])
    trained = sorted(glob.glob(os.path.join(tmp, "run", "checkpoints", "*", "step_*")))
    check(len(trained) == 1, f"refusals: trained a checkpoint at 96 tokens ({trained})")
    p = run([args.ringtrain, "generate", cfg, "--checkpoint", trained[-1], "--max-new-tokens", "4", "--prompt",
             ",".join(["5"] * 120)], expect_ok=False)
    check(p.returncode == 0 and "warning" in p.stderr and "covers 256" in p.stderr,
          f"refusals: 120 tokens past the trained 96, covered by llama3 scaling: exit {p.returncode}, "
          f"{p.stderr.strip()[:200]}")


def logits_match(a, b):
    """-> (relative max difference of two (steps, V) logits arrays, whether within 1e-5 and NaN-free)."""
    if a.shape != b.shape or not np.isfinite(a).all() or not np.isfinite(b).all():
        return float("inf"), False
    rel = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
    return rel, rel <= 1e-5


def plan_generate_json(cfg, ckpt, prompt_len, new, extra=()):
    p = run([args.ringtrain, "plan", cfg, "--json", "--generate-context", str(prompt_len), "--max-new-tokens",
             str(new), "--set", "train.init_from=" + ckpt] + list(extra))
    return json.loads(p.stdout.strip().splitlines()[0])["generate"]


def case_chunks(tmp):
    cfg = write_config(os.path.join(tmp, "gen.yaml"), tmp)
    ckpt, _, weights = fixture(tmp, "gqa_llama3")
    new = 24
    ref, _ = fx.greedy_generate("gqa_llama3", weights, PROMPT, new, eos=2)
    prefill = len(PROMPT) - 1  # 36 tokens: 5, 7 and 13 do not divide it; 35 makes two chunks, the second of one
    grids = [(1, [], (1, 5, 13, 35)), (2, ["parallel.cp=2"], (1, 7, 35)), (4, ["parallel.cp=4"], (3, 13)),
             (4, ["parallel.cp=4", "parallel.cp_a2a=2"], (5,)), (2, ["parallel.tp=2"], (1, 7)),
             (4, ["parallel.cp=2", "parallel.tp=2"], (5,))]
    for np_, sets, chunks in grids:
        where = " ".join(sets) or "cp=1"
        base_npy = os.path.join(tmp, "base.npy")
        base, _ = generate(cfg, ckpt, PROMPT, new=new, np_=np_, sets=sets,
                           extra=["--eos-id", "-1", "--overwrite", "--dump-logits", base_npy])
        check(base["prefill_chunks"] == 1 and len(ref) > 0 and base["new_ids"][:len(ref)] == ref,
              f"chunks {where}: the one-pass prefill's {new} ids equal the NumPy reference")
        for chunk in chunks:
            npy = os.path.join(tmp, f"chunk{chunk}.npy")
            out, err = generate(cfg, ckpt, PROMPT, new=new, np_=np_, sets=sets,
                                extra=["--eos-id", "-1", "--prefill-chunk", str(chunk), "--overwrite", "--dump-logits", npy])
            want_chunks = -(-prefill // chunk)
            rel, close = logits_match(np.load(npy), np.load(base_npy))
            check(out["prefill_chunks"] == want_chunks and out["prefill_chunk"] == chunk and
                  f"in {want_chunks} chunks of {chunk}" in err and f"--prefill-chunk {chunk}" in err,
                  f"chunks {where} --prefill-chunk {chunk}: {out['prefill_chunks']} chunks, said at start-up")
            check(out["new_ids"] == base["new_ids"] and close,
                  f"chunks {where} --prefill-chunk {chunk}: {new} ids equal the one pass's, logits within "
                  f"{rel:.2e} relative")
        # --warmup with chunks: the cache emptied after the untimed prefill, the timed one the same logits
        npy = os.path.join(tmp, "warm.npy")
        warm, _ = generate(cfg, ckpt, PROMPT, new=new, np_=np_, sets=sets,
                           extra=["--eos-id", "-1", "--prefill-chunk", str(chunks[0]), "--warmup", "--overwrite",
                                  "--dump-logits", npy])
        rel, close = logits_match(np.load(npy), np.load(base_npy))
        check(warm["new_ids"] == base["new_ids"] and close and (warm.get("prefill_warmup_s") or 0) > 0,
              f"chunks {where} --prefill-chunk {chunks[0]} --warmup: the same ids, logits within {rel:.2e}")
    # A longer prompt, so that chunks and the cache cross the CPU kernel's 128-row tiles.
    long_prompt = [int(t) for t in np.random.default_rng(4).integers(3, fx.VOCAB, 250)]
    for np_, sets in ((1, []), (2, ["parallel.cp=2"])):
        where = " ".join(sets) or "cp=1"
        base_npy = os.path.join(tmp, "base.npy")
        base, _ = generate(cfg, ckpt, long_prompt, new=8, np_=np_, sets=sets,
                           extra=["--eos-id", "-1", "--overwrite", "--dump-logits", base_npy])
        for chunk in (100, 67):
            npy = os.path.join(tmp, f"long{chunk}.npy")
            out, _ = generate(cfg, ckpt, long_prompt, new=8, np_=np_, sets=sets,
                              extra=["--eos-id", "-1", "--prefill-chunk", str(chunk), "--overwrite", "--dump-logits", npy])
            rel, close = logits_match(np.load(npy), np.load(base_npy))
            check(out["prefill_chunks"] == -(-249 // chunk) and out["new_ids"] == base["new_ids"] and close,
                  f"chunks {where}: a 250-token prompt in chunks of {chunk}: ids equal, logits within {rel:.2e}")
    # A chunk as long as the prefill is one pass.
    out, err = generate(cfg, ckpt, PROMPT, new=4, extra=["--prefill-chunk", str(prefill)])
    check(out["prefill_chunks"] == 1 and "chunks of" not in err, "chunks: --prefill-chunk 36 (the whole prefill) "
                                                                  "runs one pass")
    p = run([args.ringtrain, "generate", cfg, "--checkpoint", ckpt, "--prompt", "1,2,3", "--prefill-chunk", "-2"],
            expect_ok=False)
    check(p.returncode == 2 and "--prefill-chunk -2" in p.stderr, f"chunks: --prefill-chunk -2 refused, exit "
                                                                  f"{p.returncode}")

    # Auto: a limit between the one-token chunks' bytes and the one pass's chunks the prefill, with the fewest
    # chunks that fit; `ringtrain plan` under the same limit plans the same.
    for np_, sets in ((1, []), (2, ["parallel.cp=2"])):
        where = " ".join(sets) or "cp=1"
        sets_args = sum((["--set", x] for x in sets), [])
        whole = plan_generate_json(cfg, ckpt, len(PROMPT), new, sets_args)
        smallest = plan_generate_json(cfg, ckpt, len(PROMPT), new, sets_args + ["--prefill-chunk", "1"])
        check(whole["prefill_chunks"] == 1 and smallest["prefill_chunks"] == prefill and
              smallest["total_bytes_per_rank"] < whole["total_bytes_per_rank"],
              f"auto {where}: the plan's one pass needs {whole['total_bytes_per_rank']} bytes, one-token chunks "
              f"{smallest['total_bytes_per_rank']}")
        limit = (whole["total_bytes_per_rank"] + 3 * smallest["total_bytes_per_rank"]) / 4
        gib = limit / 2 ** 30
        npy = os.path.join(tmp, "auto.npy")
        base, _ = generate(cfg, ckpt, PROMPT, new=new, np_=np_, sets=sets,
                           extra=["--eos-id", "-1", "--overwrite", "--dump-logits", os.path.join(tmp, "base.npy")])
        out, err = generate(cfg, ckpt, PROMPT, new=new, np_=np_, sets=sets,
                            extra=["--eos-id", "-1", "--device-memory-gib", repr(gib), "--overwrite", "--dump-logits", npy])
        k, chunk = out["prefill_chunks"], out["prefill_chunk"]
        rel, close = logits_match(np.load(npy), np.load(os.path.join(tmp, "base.npy")))
        check(1 < k < prefill and f"in {k} chunks of {chunk}" in err and "more than the" in err and
              "--device-memory-gib" in err, f"auto {where}: under {limit:.0f} bytes the prefill runs in {k} chunks "
                                            f"of {chunk}, said at start-up")
        check(out["new_ids"] == base["new_ids"] and close, f"auto {where}: ids equal the one pass's, logits within "
                                                            f"{rel:.2e} relative")
        fit = plan_generate_json(cfg, ckpt, len(PROMPT), new, sets_args + ["--prefill-chunk", str(chunk)])
        fewer = plan_generate_json(cfg, ckpt, len(PROMPT), new, sets_args + ["--prefill-chunk",
                                                                               str(-(-prefill // (k - 1)))])
        even = -(-(-(-prefill // k)) // np_) * np_  # ceil(36 / k), rounded up to a multiple of cp (= np_ here)
        check(fit["total_bytes_per_rank"] <= limit < fewer["total_bytes_per_rank"] and chunk == even,
              f"auto {where}: {k} even chunks of {chunk} fit ({fit['total_bytes_per_rank']} bytes), {k - 1} chunks "
              f"do not ({fewer['total_bytes_per_rank']})")
        cache, rows, _ = startup_bytes(err)
        planned = plan_generate_json(cfg, ckpt, len(PROMPT), new, sets_args + [
            "--host-memory-gib", repr(gib * np_), "--ranks-per-node", str(np_)])
        check(planned["prefill_chunks"] == k and planned["prefill_chunk"] == chunk and
              planned["cache_bytes_per_rank"] == cache and planned["cache_rows_per_rank"] == rows,
              f"auto {where}: `ringtrain plan` under the same limit plans {planned['prefill_chunks']} chunks of "
              f"{planned['prefill_chunk']} and the cache generate allocates ({planned['cache_bytes_per_rank']} = "
              f"{cache} bytes)")
    if args.cuda:
        chunks_cuda(tmp)


def chunks_cuda(tmp):
    """The chunked prefill on the GPU (bf16): against the one pass on the same grid (one GPU; cp 2 on two ranks sharing
    it), the first step's logits (all the prefill feeds) within 2e-2 relative, and the greedy ids equal up to a bf16
    near-tie of the one pass's own top-2 logits (within 2^-6 of the top logit's magnitude)."""
    fx.HIDDEN, fx.FF = 256, 384  # head dim 64, which the CUDA kernels take
    gpu_dir = os.path.join(tmp, "gpu")
    os.makedirs(gpu_dir)
    ckpt, _, _ = fixture(gpu_dir, "gqa_llama3")
    cfg = write_config(os.path.join(gpu_dir, "gen_gpu.yaml"), gpu_dir, device="cuda")
    prompt = [int(t) for t in np.random.default_rng(5).integers(3, fx.VOCAB, 250)]
    for np_, sets in ((1, []), (2, ["parallel.cp=2", "parallel.comm=mpi"])):
        where = "cuda " + (" ".join(sets) or "cp=1")
        base_npy = os.path.join(gpu_dir, "base.npy")
        base, _ = generate(cfg, ckpt, prompt, new=16, np_=np_, sets=sets,
                           extra=["--eos-id", "-1", "--overwrite", "--dump-logits", base_npy])
        ref = np.load(base_npy)
        for chunk in (1, 64, 100):
            npy = os.path.join(gpu_dir, f"chunk{chunk}.npy")
            out, _ = generate(cfg, ckpt, prompt, new=16, np_=np_, sets=sets,
                              extra=["--eos-id", "-1", "--prefill-chunk", str(chunk), "--overwrite", "--dump-logits", npy])
            got = np.load(npy)
            rel, _ = logits_match(got[:1], ref[:1])
            first = next((i for i in range(16) if out["new_ids"][i] != base["new_ids"][i]), None)
            tie = True
            if first is not None:
                top = np.sort(ref[first])[::-1]
                tie = (top[0] - top[1]) <= abs(top[0]) * 2.0 ** -6
            check(out["prefill_chunks"] == -(-249 // chunk) and rel <= 2e-2 and tie,
                  f"{where} --prefill-chunk {chunk}: first logits within {rel:.2e} relative, ids "
                  + ("equal" if first is None else f"diverge at step {first} ({'a near-tie' if tie else 'NOT a tie'})"))


def startup_bytes(stderr):
    """generate's start-up line -> (cache bytes, rows, K/V bytes)."""
    import re
    m = re.search(r"KV cache (\d+) bytes per rank \((\d+) rows; K and V (\d+) bytes\)", stderr)
    if not m:
        raise SystemExit(f"no KV cache start-up line in generate's output:\n{stderr}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def case_plan(tmp):
    cfg = write_config(os.path.join(tmp, "gen.yaml"), tmp)
    ckpt, _, _ = fixture(tmp, "gqa_llama3")  # 2 layers, 2 KV heads of 16
    heads, kv, d = fx.VARIANTS["gqa_llama3"]["heads"], fx.VARIANTS["gqa_llama3"]["kv"], fx.HIDDEN // 4
    new = 9
    for np_, cp, tp, prompt_len in ((1, 1, 1, 37), (2, 2, 1, 37), (2, 2, 1, 50), (4, 2, 2, 41)):
        sets = [f"parallel.cp={cp}", f"parallel.tp={tp}"]
        plan = run([args.ringtrain, "plan", cfg, "--json", "--generate-context", str(prompt_len), "--max-new-tokens",
                    str(new), "--set", "train.init_from=" + ckpt] + sum((["--set", x] for x in sets), []))
        g = json.loads(plan.stdout.strip().splitlines()[0])["generate"]
        _, err = generate(cfg, ckpt, [int(t) for t in np.arange(prompt_len) % 250 + 3], new=new,
                          np_=np_, sets=sets, extra=["--eos-id", "-1"])
        cache, rows, kv_bytes = startup_bytes(err)
        want_rows = -(-(prompt_len + new) // cp) + 1  # the decode's even shards outgrow the prefill's here
        want_kv = 2 * fx.LAYERS * want_rows * (kv // tp) * d * 4
        check(g["cache_bytes_per_rank"] == cache and g["cache_rows_per_rank"] == rows,
              f"plan cp {cp} tp {tp} prompt {prompt_len}: the plan's cache {g['cache_bytes_per_rank']} bytes, "
              f"{g['cache_rows_per_rank']} rows = generate's {cache} bytes, {rows} rows")
        check(rows == want_rows and kv_bytes == want_kv and g["kv_bytes_per_rank"] == want_kv,
              f"plan cp {cp} tp {tp}: K / V {g['kv_bytes_per_rank']} bytes = 2 x {fx.LAYERS} layers x {want_rows} "
              f"rows x {kv // tp} x {d} x 4 = {want_kv}")
        check(g["total_bytes_per_rank"] > g["cache_bytes_per_rank"] + g["prefill_bytes_per_rank"] - 1 and
              g["prefill_tokens_per_rank"] == -(-(prompt_len - 1) // (2 * cp)) * 2,
              f"plan cp {cp}: prefill of {g['prefill_tokens_per_rank']} tokens per rank, total counts both arenas")
    # A longer prompt needs more cache: the plan grows with it.
    small = json.loads(run([args.ringtrain, "plan", cfg, "--json", "--generate-context", "40", "--set",
                            "train.init_from=" + ckpt]).stdout.splitlines()[0])["generate"]
    large = json.loads(run([args.ringtrain, "plan", cfg, "--json", "--generate-context", "200", "--set",
                            "train.init_from=" + ckpt]).stdout.splitlines()[0])["generate"]
    check(large["kv_bytes_per_rank"] - small["kv_bytes_per_rank"] == 2 * fx.LAYERS * 160 * kv * d * 4,
          "plan: 160 more prompt tokens add 2 L x 160 rows of K / V")
    p = run([args.ringtrain, "plan", cfg, "--generate-context", "40", "--set", "train.init_from=" + ckpt])
    check("KV cache" in p.stdout and "generate" in p.stdout, "plan: the text output has a generate line")
    p = run([args.ringtrain, "generate", cfg, "--checkpoint", ckpt, "--prompt", ",".join(["5"] * 37),
             "--max-new-tokens", "9", "--device-memory-gib", "0.0001"], expect_ok=False)
    check(p.returncode == 2 and "does not fit" in p.stderr and "KV cache" in p.stderr and
          p.stderr.count("error") == 1 and not p.stdout.strip(),
          f"refusal: generate past --device-memory-gib, exit {p.returncode}: {p.stderr.strip()[-300:]}")
    p = run([args.ringtrain, "plan", cfg, "--generate-context", "0", "--set", "train.init_from=" + ckpt],
            expect_ok=False)
    check(p.returncode == 2 and "--generate-context 0" in p.stderr, f"plan: --generate-context 0 refused, exit "
                                                                    f"{p.returncode}")
    p = run([args.ringtrain, "plan", cfg, "--max-new-tokens", "8", "--set", "train.init_from=" + ckpt],
            expect_ok=False)
    check(p.returncode == 2 and "--generate-context" in p.stderr, f"plan: --max-new-tokens alone refused, exit "
                                                                  f"{p.returncode}")


def hf_generate(model, prompt, new, device):
    import torch
    ids = torch.tensor([prompt], device=device)
    model.generation_config.eos_token_id = None  # never stop early: ringtrain runs with --eos-id -1
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
                             output_scores=True, return_dict_in_generate=True)
    return out.sequences[0, len(prompt):].tolist(), [s[0].float().cpu().numpy() for s in out.scores]


def case_transformers(tmp):
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"skipped: transformers / torch not importable ({e})")
        sys.exit(77)
    cfg = write_config(os.path.join(tmp, "gen.yaml"), tmp)
    ckpt, exported, _ = fixture(tmp, "gqa_llama3")
    model = transformers.AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    ref, _ = hf_generate(model, PROMPT, NEW, "cpu")
    out, _ = generate(cfg, ckpt, PROMPT, extra=["--eos-id", "-1"])
    check(out["new_ids"] == ref, f"transformers {transformers.__version__} fp32 CPU: {NEW} greedy ids equal")
    if not args.cuda:
        return
    # The CUDA kernels take head dims 64 and 128: the same fixture at hidden 256 (4 heads of 64).
    fx.HIDDEN, fx.FF = 256, 384
    gpu_dir = os.path.join(tmp, "gpu")
    os.makedirs(gpu_dir)
    ckpt, _, _ = fixture(gpu_dir, "gqa_llama3")
    bf16 = os.path.join(tmp, "export_bf16")
    run([args.ringtrain, "export-hf", ckpt, "--out", bf16, "--dtype", "bf16"])
    ckpt16 = os.path.join(tmp, "ckpt_bf16")
    run([args.ringtrain, "import-hf", bf16, "--out", ckpt16, "--device", "cuda"])
    model16 = transformers.AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.bfloat16).to("cuda").eval()
    ref16, scores = hf_generate(model16, PROMPT, 16, "cuda")
    cfg_gpu = write_config(os.path.join(tmp, "gen_gpu.yaml"), tmp, device="cuda")
    ours, _ = generate(cfg_gpu, ckpt16, PROMPT, new=16, extra=["--eos-id", "-1"])
    got = ours["new_ids"]
    first = next((i for i in range(16) if got[i] != ref16[i]), None)
    if first is None:
        check(True, "transformers bf16 GPU: 16 greedy ids equal")
    else:
        s = np.sort(scores[first])[::-1]
        tie = (s[0] - s[1]) <= abs(s[0]) * 2.0 ** -6
        check(tie, f"transformers bf16 GPU: ids diverge at step {first}, where transformers' top-2 logits are "
                   f"{s[0]:.4f} and {s[1]:.4f} ({'a bf16 near-tie' if tie else 'not a near-tie'})")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringtrain", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--cuda", action="store_true", help="transformers and chunks cases: also the bf16 checks on "
                                                         "the GPU")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("case", choices=["reference", "grids", "consistency", "refusals", "plan", "chunks",
                                     "transformers"])
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rt_generate_")
    try:
        globals()["case_" + args.case](tmp)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")
