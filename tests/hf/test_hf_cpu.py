#!/usr/bin/env python3
"""CI checks of Hugging Face import/export, init_from and uint32 shards (CPU, NumPy only, no PyTorch).

  test_hf_cpu.py --ringtrain build/ringtrain [--mpirun mpirun] CASE

CASE:
  forward     every fixture variant (tests/hf/hf_fixture.py: both config styles, sharded weights with an index,
              GQA/untied/llama3, tied MHA, yarn, Mistral + linear) is imported, and `ringtrain eval
              --dump-logits` on the CPU matches the fp64 NumPy forward that follows transformers' Llama code:
              logits and loss within 1e-5 relative
  roundtrip   export-hf --dtype fp32 then import-hf gives bitwise-identical weights; config.json carries the
              RoPE fields and max_position_embeddings; tokenizer and generation_config files are copied; bf16
              export rounds to nearest even
  init_from   train.init_from (a checkpoint, or the HF directory itself) on grids (1,1,1), (1,2,1) and (1,1,2)
              gives the same losses (1e-4 relative); rope overrides are printed with both values; a disagreeing
              model key is refused naming it; checkpoint.resume wins over init_from
  uint32      an llm.c (20240801, 7, uint32) shard with tokens above 65535 trains
  refusals    every unsupported model is refused with exit 2, naming the field and its value
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import hf_fixture as fx
except ImportError as e:  # CI installs python3-numpy (.ci/run, launch/install-deps.sh)
    print(f"test_hf_cpu: NumPy is required ({e}); install python3-numpy", file=sys.stderr)
    sys.exit(1)

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def run(cmd, expect_ok=True, env=None):
    e = dict(os.environ, **MPI_ENV, **(env or {}))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
    if expect_ok and p.returncode != 0:
        print(p.stdout)
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(cmd)}")
    return p


def write_config(path, run_dir, data_path, eval_path, seq_len, extra=""):
    with open(path, "w") as f:
        f.write(f"""device: cpu
data:
  source: shards
  path: {data_path}
  eval_path: {eval_path}
  seq_len: {seq_len}
train:
  batch_size: 2
  steps: 3
  eval_every: 0
  eval_batches: 1
  run_dir: {run_dir}
optim:
  lr: 0.01
  min_lr: 0.001
  warmup_steps: 0
checkpoint:
  save_final: false
{extra}""")


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def make_data(tmp, vocab, n=4000, seed=7):
    rng = np.random.default_rng(seed)
    train, ev = os.path.join(tmp, "train.bin"), os.path.join(tmp, "eval.bin")
    fx.write_llmc_shard(train, rng.integers(0, vocab, n))
    fx.write_llmc_shard(ev, rng.integers(0, vocab, n))
    return train, ev


def case_forward(args, tmp):
    train, ev = make_data(tmp, fx.VOCAB)
    for name in fx.VARIANTS:
        hf = os.path.join(tmp, "hf_" + name)
        weights = fx.write_model_dir(hf, name, seed=len(name))
        ckpt = os.path.join(tmp, "ckpt_" + name)
        run([args.ringtrain, "import-hf", hf, "--out", ckpt, "--device", "cpu"])
        cfg = os.path.join(tmp, f"eval_{name}.yaml")
        write_config(cfg, os.path.join(tmp, "run_" + name), train, ev, 96)
        dump = os.path.join(tmp, f"logits_{name}.npy")
        out = run([args.ringtrain, "eval", cfg, "--checkpoint", ckpt, "--dump-logits", dump,
                   "--set", "train.init_from=" + ckpt]).stdout
        tokens = np.load(dump + ".tokens.npy").astype(np.int64)
        ours = np.load(dump)
        ref = fx.forward_logits(name, weights, tokens)
        loss_ref = fx.mean_loss(ref, tokens)
        m = re.search(r"mean loss ([0-9.eE+-]+) over", out)
        loss = float(m.group(1)) if m else float("nan")
        check(rel(ours, ref) < 1e-5, f"forward {name}: logits vs fp64 NumPy transformers-Llama, rel {rel(ours, ref):.2e}")
        check(abs(loss - loss_ref) / loss_ref < 1e-5,
              f"forward {name}: loss {loss:.7f} vs NumPy {loss_ref:.7f} (rel {abs(loss - loss_ref) / loss_ref:.2e})")
        if name == "gqa_llama3":  # the scaling must matter, or the check proves nothing about it
            plain = dict(fx.VARIANTS[name])
            fx.VARIANTS["_plain"] = dict(plain, rope={"rope_type": "default"})
            ref_plain = fx.forward_logits("_plain", weights, tokens)
            del fx.VARIANTS["_plain"]
            check(rel(ref_plain, ref) > 1e-3, f"forward {name}: llama3 scaling changes the logits "
                                              f"(rel {rel(ref_plain, ref):.2e} vs unscaled)")


def tensors_of(path):
    t, meta = fx.read_safetensors(path)
    return t, meta


def case_roundtrip(args, tmp):
    name = "gqa_llama3"
    hf = os.path.join(tmp, "hf")
    fx.write_model_dir(hf, name)
    ckpt = os.path.join(tmp, "ckpt")
    run([args.ringtrain, "import-hf", hf, "--out", ckpt, "--device", "cpu"])
    out = os.path.join(tmp, "exported")
    run([args.ringtrain, "export-hf", ckpt, "--out", out, "--dtype", "fp32", "--shard-bytes", "60000"])
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    check(cfg["architectures"] == ["LlamaForCausalLM"], "export: architectures LlamaForCausalLM")
    check(cfg["max_position_embeddings"] == fx.MAX_POS, f"export: max_position_embeddings {cfg['max_position_embeddings']}"
                                                       f" = the source context {fx.MAX_POS}")
    rp = cfg["rope_parameters"]
    check(rp["rope_type"] == "llama3" and rp["factor"] == 4.0 and rp["low_freq_factor"] == 1.0 and
          rp["high_freq_factor"] == 4.0 and rp["original_max_position_embeddings"] == 64 and
          rp["rope_theta"] == fx.THETA, f"export: rope_parameters {rp}")
    check(cfg["rope_scaling"]["rope_type"] == "llama3" and cfg["rope_theta"] == fx.THETA, "export: 4.x rope fields")
    check(cfg["num_key_value_heads"] == 2 and cfg["tie_word_embeddings"] is False, "export: GQA, untied")
    check(cfg.get("bos_token_id") == 1 and cfg.get("eos_token_id") == 2, "export: token ids from the source")
    for side in ("tokenizer.json", "generation_config.json"):
        check(os.path.exists(os.path.join(out, side)), f"export: {side} copied from the source")
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    check(len(shards) > 1, f"export: {len(shards)} shards with an index")
    back = os.path.join(tmp, "ckpt_back")
    run([args.ringtrain, "import-hf", out, "--out", back, "--device", "cpu"])
    a, _ = tensors_of(os.path.join(ckpt, "model.safetensors"))
    b, _ = tensors_of(os.path.join(back, "model.safetensors"))
    check(a.keys() == b.keys() and all(a[k] == b[k] for k in a), "export fp32 -> import: bitwise-identical weights")
    # bf16 export: round to nearest even of the fp32 checkpoint values.
    out16 = os.path.join(tmp, "exported_bf16")
    run([args.ringtrain, "export-hf", ckpt, "--out", out16])
    got = {}
    for s in sorted(set(json.load(open(os.path.join(out16, "model.safetensors.index.json")))["weight_map"].values())):
        got.update(tensors_of(os.path.join(out16, s))[0])
    w = a["layers.0.attn.wq.weight"]
    expect = fx.bf16_round(np.frombuffer(w[2], dtype="<f4"))[0]
    g = got["model.layers.0.self_attn.q_proj.weight"]
    check(g[0] == "BF16" and np.array_equal(np.frombuffer(g[2], dtype="<u2"), expect), "export bf16: nearest-even bits")
    p = run([args.ringtrain, "export-hf", ckpt, "--out", out], expect_ok=False)
    check(p.returncode == 2 and "already exists" in p.stdout, "export: an existing --out is refused with exit 2")


def losses_of(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(l)["loss"] for l in f if '"loss"' in l and '"eval_loss"' not in l]


def case_init_from(args, tmp):
    name = "gqa_llama3"
    hf = os.path.join(tmp, "hf")
    fx.write_model_dir(hf, name)
    ckpt = os.path.join(tmp, "ckpt")
    run([args.ringtrain, "import-hf", hf, "--out", ckpt, "--device", "cpu"])
    train, ev = make_data(tmp, fx.VOCAB)
    cfg = os.path.join(tmp, "train.yaml")
    write_config(cfg, os.path.join(tmp, "unused"), train, ev, 96, extra=f"  every: 0\n")
    base = ["--set", "train.init_from=" + ckpt]
    r1 = os.path.join(tmp, "r111")
    out = run([args.ringtrain, "train", cfg, *base, "--set", "train.run_dir=" + r1]).stdout
    check("initialised from" in out and "fresh optimizer at step 0" in out, "init_from: start-up line")
    ref = losses_of(r1)
    check(len(ref) == 3 and max(ref) - min(ref) > 1e-3, f"init_from (1,1,1): losses {ref} move")
    rhf = os.path.join(tmp, "rhf")
    run([args.ringtrain, "train", cfg, "--set", "train.init_from=" + hf, "--set", "train.run_dir=" + rhf])
    check(losses_of(rhf) == ref, "init_from the HF directory itself = init_from its import (bitwise)")
    for grid in ("cp", "tp"):
        rd = os.path.join(tmp, "r_" + grid)
        run([args.mpirun, "-np", "2", "--oversubscribe", args.ringtrain, "train", cfg, *base,
             "--set", f"parallel.{grid}=2", "--set", "train.run_dir=" + rd])
        got = losses_of(rd)
        worst = max(abs(x - y) / abs(y) for x, y in zip(got, ref)) if len(got) == len(ref) else 1.0
        check(worst < 1e-4, f"init_from on grid {'(1,2,1)' if grid == 'cp' else '(1,1,2)'}: losses {got}, "
                            f"worst rel {worst:.1e} vs one rank")
    # RoPE overrides (context extension) are allowed and printed with both values.
    ro = os.path.join(tmp, "r_override")
    out = run([args.ringtrain, "train", cfg, *base, "--set", "train.run_dir=" + ro,
               "--set", "model.rope_scaling.factor=8", "--set", "model.rope_base=20000"]).stdout
    check("model.rope_scaling.factor: 8 (config) overrides 4 (train.init_from" in out and
          "model.rope_base: 20000 (config) overrides 10000" in out, "init_from: rope overrides printed with both values")
    check(losses_of(ro)[0] != ref[0], "init_from: the rope override changes the loss")
    # A disagreeing model key is refused, naming it and both values.
    p = run([args.ringtrain, "train", cfg, *base, "--set", "model.n_layer=3"], expect_ok=False)
    check(p.returncode != 0 and "model.n_layer: the config sets 3, the train.init_from source has 2" in p.stdout, "init_from: a disagreeing model.n_layer is refused naming it")
    # checkpoint.resume wins: a run with a checkpoint continues rather than restarting.
    rr = os.path.join(tmp, "r_resume")
    run([args.ringtrain, "train", cfg, *base, "--set", "train.run_dir=" + rr, "--set", "checkpoint.save_final=true"])
    out = run([args.ringtrain, "train", cfg, *base, "--set", "train.run_dir=" + rr, "--set", "checkpoint.resume=auto",
               "--set", "train.steps=4"]).stdout
    check("resumed from" in out and "initialised from" not in out, "checkpoint.resume wins over train.init_from")
    # configs/finetune-hf-64k.yaml (the README walk-through) loads and plans with a fixture as its source.
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    p = run([args.ringtrain, "plan", os.path.join(repo, "configs", "finetune-hf-64k.yaml"), "--set",
             "train.init_from=" + ckpt, "--set", "data.path=" + train, "--set", "data.eval_path=" + ev,
             "--set", "data.seq_len=96", "--set", "device=cpu"], expect_ok=False)
    check(p.returncode == 0 and "L=2 d=64 H=4 Hkv=2" in p.stdout,
          "configs/finetune-hf-64k.yaml plans with an imported model: " + p.stdout.strip()[-200:])
    # The trained checkpoint exports with the trained context and imports back bitwise.
    step3 = os.path.join(rr, "checkpoints", "main", "step_3")
    ex = os.path.join(tmp, "trained_hf")
    run([args.ringtrain, "export-hf", step3, "--out", ex, "--dtype", "fp32"])
    cfgj = json.load(open(os.path.join(ex, "config.json")))
    check(cfgj["max_position_embeddings"] == 96, "export of a trained checkpoint: max_position_embeddings = seq_len 96")
    check(os.path.exists(os.path.join(ex, "tokenizer.json")), "export of a trained checkpoint: tokenizer from the source")


def case_uint32(args, tmp):
    vocab = 70000
    rng = np.random.default_rng(3)
    toks = rng.integers(60000, vocab, 6000)
    check(int(toks.max()) > 65535, f"uint32 shard: tokens up to {int(toks.max())}")
    path = os.path.join(tmp, "llama3_000.bin")
    fx.write_llmc_shard(path, toks, uint32=True)
    cfg = os.path.join(tmp, "u32.yaml")
    with open(cfg, "w") as f:
        f.write(f"""device: cpu
model: {{n_layer: 1, d_model: 32, n_head: 2, n_kv_head: 2, vocab_size: {vocab}, mlp: swiglu, d_ff: 64}}
data: {{source: shards, path: {path}, seq_len: 64}}
train: {{batch_size: 2, steps: 3, eval_every: 3, eval_batches: 1, run_dir: {os.path.join(tmp, 'run')}}}
optim: {{warmup_steps: 0}}
checkpoint: {{save_final: false}}
""")
    run([args.ringtrain, "train", cfg])
    losses = losses_of(os.path.join(tmp, "run"))
    check(len(losses) == 3 and all(np.isfinite(losses)) and abs(losses[0] - np.log(vocab)) < 1.0,
          f"uint32 shard trains: losses {losses} (ln V = {np.log(vocab):.2f})")
    p = run([args.ringtrain, "train", cfg, "--set", "model.vocab_size=65536"], expect_ok=False)
    check(p.returncode != 0 and "is >= model.vocab_size=65536" in p.stdout, "uint32 shard: a token >= vocab is refused")


def case_refusals(args, tmp):
    cases = [
        ("mistral_linear", {"sliding_window": 4096}, "'sliding_window' = 4096"),
        ("gqa_llama3", {"head_dim": 32}, "'head_dim' = 32 differs from hidden_size / num_attention_heads = 16"),
        ("gqa_llama3", {"attention_bias": True}, "'attention_bias' = true"),
        ("gqa_llama3", {"mlp_bias": True}, "'mlp_bias' = true"),
        ("gqa_llama3", {"architectures": ["Qwen2ForCausalLM"]}, "'architectures' = [\"Qwen2ForCausalLM\"]"),
        ("gqa_llama3", {"torch_dtype": "int8"}, "'torch_dtype' = \"int8\""),
        ("tied_mha", {"dtype": "float8_e4m3fn"}, "'dtype' = \"float8_e4m3fn\""),
        ("gqa_llama3", {"hidden_act": "gelu"}, "'hidden_act' = \"gelu\""),
        ("gqa_llama3", {"rope_interleaved": True}, "'rope_interleaved' = true"),
        ("gqa_llama3", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "'rope_type' = \"dynamic\""),
        ("tied_mha", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "'rope_type' = \"longrope\""),
        ("gqa_yarn", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "mscale": 0.7, "rope_theta": 1e4}},
         "'mscale' = 0.7"),
        ("gqa_llama3", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "lacks 'low_freq_factor'"),
    ]
    for i, (name, edits, expect) in enumerate(cases):
        hf = os.path.join(tmp, f"bad{i}")
        fx.write_model_dir(hf, name, config_edits=edits)
        p = run([args.ringtrain, "import-hf", hf, "--out", os.path.join(tmp, f"c{i}"), "--device", "cpu"],
                expect_ok=False)
        check(p.returncode == 2 and expect in p.stdout and p.stdout.count("error") == 1,
              f"refused {list(edits)} with exit 2 (got {p.returncode}): '{expect}' in: {p.stdout.strip()[-220:]}")
    # An unknown tensor dtype, an extra (bias) tensor and a missing tensor.
    hf = os.path.join(tmp, "bad_dtype")
    fx.write_model_dir(hf, "tied_mha", extra_tensors=[("model.layers.0.self_attn.q_proj.bias", "F32",
                                                        np.zeros(64, np.float32), (64,))])
    p = run([args.ringtrain, "import-hf", hf, "--out", os.path.join(tmp, "cb"), "--device", "cpu"], expect_ok=False)
    check(p.returncode == 2 and "tensor 'model.layers.0.self_attn.q_proj.bias'" in p.stdout, "refused: a bias tensor")
    hf = os.path.join(tmp, "bad_i8")
    fx.write_model_dir(hf, "tied_mha", extra_tensors=[("extra", "I8", np.zeros(8, np.int8), (8,))])
    p = run([args.ringtrain, "import-hf", hf, "--out", os.path.join(tmp, "ci8"), "--device", "cpu"], expect_ok=False)
    check(p.returncode == 2 and "has dtype I8" in p.stdout, "refused: an I8 tensor names its dtype")
    # On CUDA only head dims 64 and 128 run (the fixture's is 16).
    hf = os.path.join(tmp, "cuda_hd")
    fx.write_model_dir(hf, "tied_mha")
    p = run([args.ringtrain, "import-hf", hf, "--out", os.path.join(tmp, "cc"), "--device", "cuda"], expect_ok=False)
    check(p.returncode == 2 and "head_dim = hidden_size / num_attention_heads = 16" in p.stdout and
          "64 and 128" in p.stdout, "refused on CUDA: head_dim 16")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringtrain", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("case", choices=["forward", "roundtrip", "init_from", "uint32", "refusals"])
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rt_hf_")
    try:
        globals()["case_" + args.case](args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
