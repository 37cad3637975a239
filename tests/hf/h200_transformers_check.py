#!/usr/bin/env python3
"""ringtrain against Hugging Face transformers itself (run on the GPU machine, where torch and transformers are).

  python3 tests/hf/h200_transformers_check.py --ringtrain build/ringtrain --out OUT_DIR [--seq-len 4096]

(a) A random-init LlamaForCausalLM (GQA 4/2 heads of 64, llama3 RoPE scaling factor 8 from 512 positions,
    untied) is saved with save_pretrained (fp32 safetensors) and imported with `ringtrain import-hf`. On the
    same tokens (T = --seq-len <= 4096, since transformers forms its RoPE angles in fp32):
      CPU fp32: ringtrain's logits (`ringtrain eval --dump-logits`) vs transformers' fp32 logits: <= 1e-4 relative
                (norm of the difference over the norm), and the losses within 1e-4 relative;
      CUDA bf16: ringtrain's loss vs transformers' fp32 loss within 1e-2 relative.
(b) ringtrain trains it a few steps on CUDA (train.init_from), export-hf writes it (fp32 and bf16), and
    AutoModelForCausalLM.from_pretrained loads both with no missing, unexpected or mismatched keys and no loading
    warnings; the config's RoPE fields read back as written and max_position_embeddings is the trained context;
    then the same logit and loss comparisons as (a) on the trained model.
Writes OUT_DIR/hf_transformers_check.json (every number) and .md (for bench/results/). Exits 77 with a SKIP line
when torch or transformers is not importable, 1 when a check fails.
"""
import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"SKIP: {e}; this check needs numpy, torch and transformers")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_fixture as fx  # noqa: E402  (llm.c shard writer, safetensors reader)

THETA = 500000.0
ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 512}
results = {"checks": [], "transformers": transformers.__version__, "torch": torch.__version__}


def check(cond, what, **numbers):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    results["checks"].append({"ok": bool(cond), "what": what, **numbers})


def run(cmd):
    t = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    print(f"$ {' '.join(cmd)}  ({time.time() - t:.1f} s, rc {p.returncode})", flush=True)
    if p.returncode != 0:
        print(p.stdout)
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    return p.stdout


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def make_model(path, seq_len):
    major = int(transformers.__version__.split(".")[0])
    common = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=seq_len, rms_norm_eps=1e-5,
                  tie_word_embeddings=False, initializer_range=0.06, bos_token_id=1, eos_token_id=2)
    if major >= 5:  # transformers 5.x: one rope_parameters dict holding rope_theta
        cfg = LlamaConfig(**common, rope_parameters=dict(ROPE, rope_theta=THETA))
    else:           # 4.x: rope_theta + rope_scaling
        cfg = LlamaConfig(**common, rope_theta=THETA, rope_scaling=dict(ROPE))
    got = rope_fields(cfg)
    assert got == dict(ROPE, rope_theta=THETA), f"LlamaConfig did not take the RoPE fields: {got}"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).float().eval()
    model.save_pretrained(path)  # safetensors
    return model


def rope_fields(cfg):
    """{rope_type, rope_theta, factor, ...} from a 5.x (rope_parameters) or 4.x (rope_theta + rope_scaling) config."""
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and rp:
        d = dict(rp)
    else:
        d = dict(getattr(cfg, "rope_scaling", None) or {})
        d["rope_theta"] = cfg.rope_theta
    d.setdefault("rope_type", d.pop("type", "default"))
    return {k: d[k] for k in ["rope_type", "rope_theta", *ROPE.keys()] if k in d}


def hf_logits_and_loss(model, tokens):
    with torch.no_grad():
        ids = torch.from_numpy(tokens.astype(np.int64))
        out = model(input_ids=ids, labels=ids)
    return out.logits.double().numpy(), float(out.loss)


def ringtrain_eval(args, cfg, ckpt, device, dump):
    out = run([args.ringtrain, "eval", cfg, "--checkpoint", ckpt, "--dump-logits", dump, "--set", "device=" + device,
               "--set", "train.init_from=" + ckpt])
    loss = float(re.search(r"mean loss ([0-9.eE+-]+) over", out).group(1))
    return np.load(dump), np.load(dump + ".tokens.npy"), loss


def compare(args, tag, cfg, ckpt, hf_model, tmp):
    ours_cpu, tokens, loss_cpu = ringtrain_eval(args, cfg, ckpt, "cpu", os.path.join(tmp, f"{tag}_cpu.npy"))
    ref, ref_loss = hf_logits_and_loss(hf_model, tokens)
    r = rel(ours_cpu, ref)
    check(r <= 1e-4, f"{tag}: CPU fp32 logits vs transformers fp32, T={tokens.shape[1]}: rel {r:.2e} (<= 1e-4)",
          rel_logits=r)
    rl = abs(loss_cpu - ref_loss) / ref_loss
    check(rl <= 1e-4, f"{tag}: CPU fp32 loss {loss_cpu:.6f} vs transformers {ref_loss:.6f}: rel {rl:.2e} (<= 1e-4)",
          loss=loss_cpu, ref_loss=ref_loss, rel_loss=rl)
    if not args.no_cuda:
        _, tokens_gpu, loss_gpu = ringtrain_eval(args, cfg, ckpt, "cuda", os.path.join(tmp, f"{tag}_gpu.npy"))
        assert np.array_equal(tokens_gpu, tokens), "the CUDA eval read other tokens"
        rg = abs(loss_gpu - ref_loss) / ref_loss
        check(rg <= 1e-2, f"{tag}: CUDA bf16 loss {loss_gpu:.6f} vs transformers fp32 {ref_loss:.6f}: rel {rg:.2e} "
                          f"(<= 1e-2)", loss_bf16=loss_gpu, ref_loss=ref_loss, rel_loss_bf16=rg)


def load_exported(path):
    """from_pretrained with loading info and the transformers log captured."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep(level=logging.WARNING)
    tlog = logging.getLogger("transformers")
    tlog.addHandler(handler)
    try:
        try:
            model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True,
                                                               attn_implementation="eager")
        except TypeError:  # should output_loading_info be gone: the captured log still reports missing keys
            model, info = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager"), {}
            records.append("note: from_pretrained took no output_loading_info; checked the log only")
    finally:
        tlog.removeHandler(handler)
    def field(k):  # a dict in 4.x; tolerate an object with attributes
        v = info.get(k) if isinstance(info, dict) else getattr(info, k, None)
        return list(v or [])

    bad = {k: field(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    warn = [m for m in records if re.search(r"not initialized|not used|missing|unexpected|mismatch", m, re.I)]
    return model.float().eval(), bad, warn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringtrain", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--no-cuda", action="store_true", help="CPU checks only")
    args = ap.parse_args()
    assert args.seq_len <= 4096, "compare at T <= 4096 (transformers' fp32 RoPE angles)"
    if not args.no_cuda and not torch.cuda.is_available():
        print("no CUDA device: running the CPU checks only")
        args.no_cuda = True
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="rt_hfcheck_")
    try:
        hf = os.path.join(tmp, "hf_random")
        model = make_model(hf, args.seq_len)
        print(model.config)
        ckpt = os.path.join(tmp, "ckpt")
        run([args.ringtrain, "import-hf", hf, "--out", ckpt, "--device", "cpu" if args.no_cuda else "cuda"])
        rng = np.random.default_rng(1)
        train, ev = os.path.join(tmp, "train.bin"), os.path.join(tmp, "eval.bin")
        fx.write_llmc_shard(train, rng.integers(0, 1024, 40 * args.seq_len))
        fx.write_llmc_shard(ev, rng.integers(0, 1024, 4 * args.seq_len))
        cfg = os.path.join(tmp, "cfg.yaml")
        with open(cfg, "w") as f:
            f.write(f"data: {{source: shards, path: {train}, eval_path: {ev}, seq_len: {args.seq_len}}}\n"
                    f"train: {{batch_size: 1, steps: {args.steps}, eval_every: 0, eval_batches: 1, "
                    f"run_dir: {os.path.join(tmp, 'run')}}}\n"
                    f"optim: {{lr: 0.001, min_lr: 0.0001, warmup_steps: 0}}\n")
        compare(args, "imported", cfg, ckpt, model, tmp)
        # (b) train, export, load in transformers.
        run([args.ringtrain, "train", cfg, "--set", "train.init_from=" + ckpt,
             "--set", "device=" + ("cpu" if args.no_cuda else "cuda")])
        step = os.path.join(tmp, "run", "checkpoints", f"step_{args.steps}")
        for dtype in ("fp32", "bf16"):
            out = os.path.join(tmp, "exported_" + dtype)
            run([args.ringtrain, "export-hf", step, "--out", out, "--dtype", dtype])
            trained, bad, warn = load_exported(out)
            check(not any(bad.values()) and not warn, f"export {dtype}: from_pretrained reports no missing/unexpected/"
                                                      f"mismatched keys and no warnings: {bad} {warn}")
            conf = AutoConfig.from_pretrained(out)
            got = rope_fields(conf)
            check(got == dict(ROPE, rope_theta=THETA), f"export {dtype}: RoPE fields read back as written: {got}")
            check(conf.max_position_embeddings == args.seq_len,
                  f"export {dtype}: max_position_embeddings {conf.max_position_embeddings} = trained context")
            if dtype == "fp32":
                compare(args, "trained", cfg, step, trained, tmp)
    finally:
        with open(os.path.join(args.out, "hf_transformers_check.json"), "w") as f:
            json.dump(results, f, indent=2)
        with open(os.path.join(args.out, "hf_transformers_check.md"), "w") as f:
            f.write(f"# ringtrain vs transformers {results['transformers']} (torch {results['torch']})\n\n"
                    f"command: {' '.join(sys.argv)}\n\n")
            for c in results["checks"]:
                f.write(f"- {'ok' if c['ok'] else 'FAIL'}: {c['what']}\n")
        shutil.rmtree(tmp, ignore_errors=True)
    failed = [c for c in results["checks"] if not c["ok"]]
    print(f"{len(results['checks']) - len(failed)}/{len(results['checks'])} checks passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
